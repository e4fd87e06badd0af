//! InfiniBand / RoCE (P13): the verbs interface the RC protocol is written against
//! ([`verbs`]), a deterministic simulated fabric implementing it (`sim`, feature `sim`: tests),
//! the trait's backend on the system's libibverbs loaded at run time ([`libverbs`], feature
//! `ib`), HCA discovery from sysfs ([`sysfs`]), the endpoint ([`ep`]) with its connection blob
//! ([`conn`]) and registration cache ([`regcache`]), and the choice of device ([`setup`]).
//! Nothing past device listing has met a device: no machine it was built on has one
//! (docs/architecture.md, "InfiniBand / RoCE (P13)").

pub mod any;
pub mod conn;
mod contract;
pub mod ep;
#[cfg(feature = "ib")]
pub mod libverbs;
pub mod regcache;
pub mod setup;
#[cfg(feature = "sim")]
pub mod sim;
pub mod sysfs;
pub mod verbs;

pub use any::{AnyVerbs, IbNet};

/// Whether `ib` reaches between the ranks of two address records (the transport table's
/// `canConnect`): both published an `ib` blob, and their ports are on one fabric.
pub fn can_connect(
    a: &rcomm_runtime::wire::AddrRecord,
    b: &rcomm_runtime::wire::AddrRecord,
) -> bool {
    match (blob_of(a), blob_of(b)) {
        (Some(x), Some(y)) => x.same_fabric(&y),
        _ => false,
    }
}

/// The `ib` blob a record carries, if any (and if it decodes).
pub fn blob_of(r: &rcomm_runtime::wire::AddrRecord) -> Option<conn::ConnBlob> {
    r.endpoints.iter().find_map(|e| match e {
        rcomm_runtime::wire::EndpointAddr::Other { kind, data } if *kind == conn::ENDPOINT_KIND => {
            conn::ConnBlob::decode(data).ok()
        }
        _ => None,
    })
}

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
