//! InfiniBand / RoCE (P13), first step: the verbs interface the RC protocol will be written
//! against ([`verbs`]), a deterministic simulated fabric implementing it ([`sim`]), HCA
//! discovery from sysfs ([`sysfs`]), and the trait's backend on the system's libibverbs,
//! loaded at run time ([`libverbs`]; nothing past device listing has met a device yet). No
//! transport yet (docs/architecture.md, "InfiniBand (P13), step 1").

pub mod libverbs;
pub mod sim;
pub mod sysfs;
pub mod verbs;

#[cfg(test)]
mod tests;

pub use verbs::*;

/// The GID index to use on a port when `RCOMM_IB_GID_INDEX` is unset, as NCCL chooses it: 0 on
/// InfiniBand; on RoCE the lowest index whose GID is IPv4-mapped and RoCE v2 (routable, and
/// what switches' ECN/PFC setups expect), falling back in this order to RoCE v2 with another
/// global address, then IPv4 over RoCE v1, then any non-empty GID. `None`: the table is empty.
pub fn gid_index_auto(link_layer: LinkLayer, table: &[GidEntry]) -> Option<u16> {
    let used = table.iter().filter(|e| !e.gid.is_zero());
    if link_layer == LinkLayer::InfiniBand {
        return used.map(|e| e.index).min();
    }
    used.max_by_key(|e| {
        (
            e.gid.ipv4().is_some(),
            e.gid_type == GidType::RoceV2,
            !e.gid.is_link_local(),
            std::cmp::Reverse(e.index),
        )
    })
    .map(|e| e.index)
}
