//! The `ib` connection blob: what a rank publishes in its address record so that every peer
//! can bring its RC queue pairs to RTR/RTS without another round trip (NCCL's connect blob
//! through the bootstrap). It carries the port's address (LID, GID), the path MTU, the first
//! PSN, where the rank's eager rings are (address, rkey, geometry) and, for every peer, the
//! QP numbers made for it — as runs, since an HCA numbers consecutive QPs consecutively.

use super::verbs::{Gid, LinkLayer, Mtu};

/// `EndpointAddr::Other` kind of the blob.
pub const ENDPOINT_KIND: u8 = 0x1b;
const MAGIC: [u8; 2] = *b"IB";
const VERSION: u8 = 1;
/// Bounds a decoder enforces (an address record is at most 4 KiB anyway).
const MAX_RANKS: u32 = 1 << 20;
const MAX_QPS: u8 = 16;
const MAX_RUNS: usize = 1024;

/// A rank's `ib` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnBlob {
    /// IB or RoCE.
    pub link_layer: LinkLayer,
    /// The port's LID (IB).
    pub lid: u16,
    /// The GID peers address (RoCE; IB across subnets). Its first 8 bytes are the subnet
    /// prefix, which tells two IB ports on different fabrics apart.
    pub gid: Gid,
    /// The port's active MTU (a connection takes the smaller of both).
    pub mtu: Mtu,
    /// First PSN of every QP this rank sends on.
    pub psn: u32,
    /// Start of this rank's eager rings: peer `p`'s ring is at `ring_addr + p·slots·slot_bytes`.
    pub ring_addr: u64,
    /// Their remote key.
    pub ring_rkey: u32,
    /// Eager slots per peer.
    pub slots: u16,
    /// Bytes per slot.
    pub slot_bytes: u32,
    /// QPs per peer.
    pub qps: u8,
    /// Ranks in the job.
    pub ranks: u32,
    /// QP numbers, `ranks·qps` of them (peer-major), as runs `(first, count)` of consecutive
    /// numbers; the rank's own entries are 0.
    runs: Vec<(u32, u32)>,
}

impl ConnBlob {
    /// A blob listing `qpns` (peer-major, `ranks·qps` entries).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        link_layer: LinkLayer,
        lid: u16,
        gid: Gid,
        mtu: Mtu,
        psn: u32,
        ring: (u64, u32),
        geometry: (u16, u32),
        qps: u8,
        qpns: &[u32],
    ) -> Self {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &q in qpns {
            match runs.last_mut() {
                Some((first, n)) if q != 0 && *first != 0 && first.wrapping_add(*n) == q => *n += 1,
                Some((0, n)) if q == 0 => *n += 1,
                _ => runs.push((q, 1)),
            }
        }
        Self {
            link_layer,
            lid,
            gid,
            mtu,
            psn,
            ring_addr: ring.0,
            ring_rkey: ring.1,
            slots: geometry.0,
            slot_bytes: geometry.1,
            qps,
            ranks: (qpns.len() / usize::from(qps.max(1))) as u32,
            runs,
        }
    }

    /// The number of this rank's `k`-th QP for `peer`.
    pub fn qpn(&self, peer: u32, k: u8) -> Option<u32> {
        if peer >= self.ranks || k >= self.qps {
            return None;
        }
        let mut i = u64::from(peer) * u64::from(self.qps) + u64::from(k);
        for &(first, n) in &self.runs {
            if i < u64::from(n) {
                return Some(if first == 0 { 0 } else { first + i as u32 });
            }
            i -= u64::from(n);
        }
        None
    }

    /// Whether two ports can reach each other: the same link layer, and on InfiniBand the
    /// same subnet prefix (other prefixes are other fabrics, unless routed — not supported).
    pub fn same_fabric(&self, o: &ConnBlob) -> bool {
        self.link_layer == o.link_layer
            && (self.link_layer == LinkLayer::Ethernet || self.gid.0[..8] == o.gid.0[..8])
    }

    /// Bytes for the address record.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(64 + 8 * self.runs.len());
        o.extend_from_slice(&MAGIC);
        o.push(VERSION);
        o.push(match self.link_layer {
            LinkLayer::InfiniBand => 0,
            LinkLayer::Ethernet => 1,
        });
        o.extend_from_slice(&self.lid.to_le_bytes());
        o.extend_from_slice(&self.gid.0);
        o.push(self.mtu as u8);
        o.extend_from_slice(&self.psn.to_le_bytes());
        o.extend_from_slice(&self.ring_addr.to_le_bytes());
        o.extend_from_slice(&self.ring_rkey.to_le_bytes());
        o.extend_from_slice(&self.slots.to_le_bytes());
        o.extend_from_slice(&self.slot_bytes.to_le_bytes());
        o.push(self.qps);
        o.extend_from_slice(&self.ranks.to_le_bytes());
        o.extend_from_slice(&(self.runs.len() as u16).to_le_bytes());
        for (first, n) in &self.runs {
            o.extend_from_slice(&first.to_le_bytes());
            o.extend_from_slice(&n.to_le_bytes());
        }
        o
    }

    /// Decodes and checks a blob: bounds, and QP numbers covering exactly `ranks·qps`.
    pub fn decode(b: &[u8]) -> Result<Self, String> {
        let mut d = Rd { b, at: 0 };
        if d.take(2)? != MAGIC {
            return Err("not an ib connection blob".into());
        }
        let v = d.u8()?;
        if v != VERSION {
            return Err(format!(
                "ib connection blob version {v}, this build speaks {VERSION}"
            ));
        }
        let link_layer = match d.u8()? {
            0 => LinkLayer::InfiniBand,
            1 => LinkLayer::Ethernet,
            x => return Err(format!("unknown link layer {x}")),
        };
        let lid = d.u16()?;
        let gid = Gid(d.take(16)?.try_into().expect("16 bytes"));
        let mtu = d.u8()?;
        let mtu = Mtu::from_bytes(128u32.checked_shl(u32::from(mtu)).unwrap_or(0))
            .filter(|_| (1..=5).contains(&mtu))
            .ok_or_else(|| format!("bad MTU code {mtu}"))?;
        let psn = d.u32()?;
        if psn > 0xff_ffff {
            return Err(format!("PSN {psn:#x} is not 24 bits"));
        }
        let ring_addr = d.u64()?;
        let ring_rkey = d.u32()?;
        let slots = d.u16()?;
        let slot_bytes = d.u32()?;
        if !(2..=4096).contains(&slots) || !(64..=1 << 20).contains(&slot_bytes) {
            return Err(format!(
                "bad ring geometry: {slots} slots of {slot_bytes} bytes"
            ));
        }
        let qps = d.u8()?;
        let ranks = d.u32()?;
        if !(1..=MAX_QPS).contains(&qps) || !(1..=MAX_RANKS).contains(&ranks) {
            return Err(format!("bad shape: {qps} QPs per peer, {ranks} ranks"));
        }
        let nruns = usize::from(d.u16()?);
        if nruns > MAX_RUNS {
            return Err(format!("{nruns} QP number runs (at most {MAX_RUNS})"));
        }
        let mut runs = Vec::with_capacity(nruns);
        let mut total = 0u64;
        for _ in 0..nruns {
            let (first, n) = (d.u32()?, d.u32()?);
            if n == 0 || (first != 0 && u64::from(first) + u64::from(n) > 1 << 24) {
                return Err(format!("bad QP number run {first:#x}+{n}"));
            }
            total += u64::from(n);
            runs.push((first, n));
        }
        if total != u64::from(ranks) * u64::from(qps) {
            return Err(format!("{total} QP numbers for {ranks} ranks of {qps} QPs"));
        }
        if d.at != b.len() {
            return Err(format!("{} bytes after the blob", b.len() - d.at));
        }
        Ok(Self {
            link_layer,
            lid,
            gid,
            mtu,
            psn,
            ring_addr,
            ring_rkey,
            slots,
            slot_bytes,
            qps,
            ranks,
            runs,
        })
    }
}

struct Rd<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| format!("ib connection blob ends at byte {}", self.b.len()))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn blob(qpns: &[u32], qps: u8) -> ConnBlob {
        ConnBlob::new(
            LinkLayer::Ethernet,
            0,
            Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
            Mtu::M1024,
            0x1234,
            (0xdead_0000, 77),
            (32, 8256),
            qps,
            qpns,
        )
    }

    #[test]
    fn qp_numbers_round_trip_as_runs() {
        // Rank 1 of 4, two QPs per peer: its own entries are 0.
        let q = [0x100, 0x101, 0, 0, 0x102, 0x103, 0x200, 0x201];
        let b = blob(&q, 2);
        assert_eq!(b.runs.len(), 4, "{:?}", b.runs);
        let d = ConnBlob::decode(&b.encode()).unwrap();
        assert_eq!(d, b);
        for p in 0..4 {
            for k in 0..2 {
                assert_eq!(d.qpn(p, k), Some(q[(p * 2 + u32::from(k)) as usize]));
            }
        }
        assert_eq!(d.qpn(4, 0), None);
        assert_eq!(d.qpn(0, 2), None);
    }

    #[test]
    fn fabrics_differ_by_link_layer_and_ib_subnet_prefix() {
        let mut a = blob(&[0, 5], 1);
        let mut b = a.clone();
        assert!(a.same_fabric(&b));
        a.link_layer = LinkLayer::InfiniBand;
        assert!(!a.same_fabric(&b));
        b.link_layer = LinkLayer::InfiniBand;
        b.gid.0[7] ^= 1;
        assert!(!a.same_fabric(&b), "another subnet prefix");
    }

    #[test]
    fn bad_blobs_are_refused_with_a_reason() {
        let good = blob(&[0, 0x300], 1).encode();
        assert!(ConnBlob::decode(&good[..good.len() - 1]).is_err());
        let mut long = good.clone();
        long.push(0);
        assert!(ConnBlob::decode(&long).unwrap_err().contains("after"));
        let mut v = good.clone();
        v[2] = 9;
        assert!(ConnBlob::decode(&v).unwrap_err().contains("version"));
        let mut m = good;
        m[22] = 7; // MTU code
        assert!(ConnBlob::decode(&m).unwrap_err().contains("MTU"));
    }

    proptest! {
        #[test]
        fn the_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ConnBlob::decode(&b);
        }

        #[test]
        fn mutated_blobs_decode_or_fail_cleanly(i in 0usize..80, x in any::<u8>()) {
            let mut b = blob(&[0x10, 0, 0x12, 0x13], 1).encode();
            let k = i % b.len();
            b[k] ^= x;
            if let Ok(d) = ConnBlob::decode(&b) {
                for p in 0..d.ranks.min(8) {
                    let _ = d.qpn(p, 0);
                }
            }
        }
    }
}
