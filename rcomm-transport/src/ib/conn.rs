//! The `ib` connection blob: what a rank publishes in its address record so that every peer
//! can bring its RC queue pairs to RTR/RTS without another round trip (NCCL's connect blob
//! through the bootstrap). It carries each rail's address (link layer, LID, GID, MTU, the
//! rings' remote key on that HCA), the first PSN, where the rank's eager rings are and their
//! geometry, and for every peer the QP numbers made for it — as runs, since an HCA numbers
//! consecutive QPs consecutively.

use super::verbs::{Gid, LinkLayer, Mtu};

/// `EndpointAddr::Other` kind of the blob.
pub const ENDPOINT_KIND: u8 = 0x1b;
const MAGIC: [u8; 2] = *b"IB";
const VERSION: u8 = 2;
/// Bounds a decoder enforces (an address record is at most 4 KiB anyway).
const MAX_RANKS: u32 = 1 << 20;
const MAX_QPS: u8 = 16;
const MAX_RAILS: u8 = 8;
const MAX_RUNS: usize = 1024;

/// One rail's address: an HCA port of the rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailAddr {
    /// IB or RoCE.
    pub link_layer: LinkLayer,
    /// The port's LID (IB).
    pub lid: u16,
    /// The GID peers address (RoCE; IB across subnets). Its first 8 bytes are the subnet
    /// prefix, which tells two IB ports on different fabrics apart.
    pub gid: Gid,
    /// The port's active MTU (a connection takes the smaller of both).
    pub mtu: Mtu,
    /// The eager rings' remote key on this rail's HCA.
    pub ring_rkey: u32,
}

impl RailAddr {
    /// Whether two ports can reach each other: the same link layer, and on InfiniBand the
    /// same subnet prefix (other prefixes are other fabrics, unless routed — not supported).
    pub fn same_fabric(&self, o: &RailAddr) -> bool {
        self.link_layer == o.link_layer
            && (self.link_layer == LinkLayer::Ethernet || self.gid.0[..8] == o.gid.0[..8])
    }
}

/// A rank's `ib` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnBlob {
    /// Its rails (HCA ports), in the order peers pair them: rail i with the peer's rail i.
    pub rails: Vec<RailAddr>,
    /// First PSN of every QP this rank sends on.
    pub psn: u32,
    /// Start of this rank's eager rings: peer `p`'s ring is at `ring_addr + p·slots·slot_bytes`
    /// (one memory, registered on every rail).
    pub ring_addr: u64,
    /// Eager slots per peer.
    pub slots: u16,
    /// Bytes per slot.
    pub slot_bytes: u32,
    /// QPs per peer and rail.
    pub qps: u8,
    /// Ranks in the job.
    pub ranks: u32,
    /// QP numbers, `ranks·rails·qps` of them (peer-major, then rail), as runs `(first, count)`
    /// of consecutive numbers; the rank's own entries are 0.
    runs: Vec<(u32, u32)>,
}

impl ConnBlob {
    /// A blob listing `qpns` (peer-major then rail, `ranks·rails·qps` entries).
    pub fn new(
        rails: Vec<RailAddr>,
        psn: u32,
        ring_addr: u64,
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
        let per_rank = (rails.len() * usize::from(qps)).max(1);
        Self {
            ranks: (qpns.len() / per_rank) as u32,
            rails,
            psn,
            ring_addr,
            slots: geometry.0,
            slot_bytes: geometry.1,
            qps,
            runs,
        }
    }

    /// The number of this rank's `k`-th QP on `rail` for `peer`.
    pub fn qpn(&self, peer: u32, rail: usize, k: u8) -> Option<u32> {
        if peer >= self.ranks || rail >= self.rails.len() || k >= self.qps {
            return None;
        }
        let per_rank = self.rails.len() as u64 * u64::from(self.qps);
        let mut i = u64::from(peer) * per_rank + rail as u64 * u64::from(self.qps) + u64::from(k);
        for &(first, n) in &self.runs {
            if i < u64::from(n) {
                return Some(if first == 0 { 0 } else { first + i as u32 });
            }
            i -= u64::from(n);
        }
        None
    }

    /// Rails two ranks share: rail i with rail i, as many as both have.
    pub fn common_rails(&self, o: &ConnBlob) -> usize {
        self.rails.len().min(o.rails.len())
    }

    /// Whether two ranks can connect: every paired rail on one fabric.
    pub fn same_fabric(&self, o: &ConnBlob) -> bool {
        let n = self.common_rails(o);
        n > 0 && (0..n).all(|i| self.rails[i].same_fabric(&o.rails[i]))
    }

    /// Bytes for the address record.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(64 + 32 * self.rails.len() + 8 * self.runs.len());
        o.extend_from_slice(&MAGIC);
        o.push(VERSION);
        o.push(self.rails.len() as u8);
        for r in &self.rails {
            o.push(match r.link_layer {
                LinkLayer::InfiniBand => 0,
                LinkLayer::Ethernet => 1,
            });
            o.extend_from_slice(&r.lid.to_le_bytes());
            o.extend_from_slice(&r.gid.0);
            o.push(r.mtu as u8);
            o.extend_from_slice(&r.ring_rkey.to_le_bytes());
        }
        o.extend_from_slice(&self.psn.to_le_bytes());
        o.extend_from_slice(&self.ring_addr.to_le_bytes());
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

    /// Decodes and checks a blob: bounds, and QP numbers covering exactly `ranks·rails·qps`.
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
        let nrails = d.u8()?;
        if !(1..=MAX_RAILS).contains(&nrails) {
            return Err(format!("{nrails} rails (1 to {MAX_RAILS})"));
        }
        let mut rails = Vec::with_capacity(usize::from(nrails));
        for _ in 0..nrails {
            let link_layer = match d.u8()? {
                0 => LinkLayer::InfiniBand,
                1 => LinkLayer::Ethernet,
                x => return Err(format!("unknown link layer {x}")),
            };
            let lid = d.u16()?;
            let gid = Gid(d.take(16)?.try_into().expect("16 bytes"));
            let mtu = d.u8()?;
            let mtu = (1..=5)
                .contains(&mtu)
                .then(|| Mtu::from_bytes(128 << mtu))
                .flatten()
                .ok_or_else(|| format!("bad MTU code {mtu}"))?;
            let ring_rkey = d.u32()?;
            rails.push(RailAddr {
                link_layer,
                lid,
                gid,
                mtu,
                ring_rkey,
            });
        }
        let psn = d.u32()?;
        if psn > 0xff_ffff {
            return Err(format!("PSN {psn:#x} is not 24 bits"));
        }
        let ring_addr = d.u64()?;
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
        // Room for the runs the input can still hold (8 bytes each), not for the count it
        // claims: a short blob must not make the decoder allocate for 1 024 runs.
        let mut runs = Vec::with_capacity(nruns.min((b.len() - d.at) / 8));
        let mut total = 0u64;
        for _ in 0..nruns {
            let (first, n) = (d.u32()?, d.u32()?);
            if n == 0 || (first != 0 && u64::from(first) + u64::from(n) > 1 << 24) {
                return Err(format!("bad QP number run {first:#x}+{n}"));
            }
            total += u64::from(n);
            runs.push((first, n));
        }
        let want = u64::from(ranks) * u64::from(nrails) * u64::from(qps);
        if total != want {
            return Err(format!(
                "{total} QP numbers for {ranks} ranks of {nrails} rails of {qps} QPs"
            ));
        }
        if d.at != b.len() {
            return Err(format!("{} bytes after the blob", b.len() - d.at));
        }
        Ok(Self {
            rails,
            psn,
            ring_addr,
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

    fn rail(ip: u8, rkey: u32) -> RailAddr {
        RailAddr {
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            gid: Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, ip)),
            mtu: Mtu::M1024,
            ring_rkey: rkey,
        }
    }

    fn blob(qpns: &[u32], rails: usize, qps: u8) -> ConnBlob {
        ConnBlob::new(
            (0..rails)
                .map(|i| rail(i as u8 + 1, 77 + i as u32))
                .collect(),
            0x1234,
            0xdead_0000,
            (32, 8256),
            qps,
            qpns,
        )
    }

    #[test]
    fn qp_numbers_round_trip_as_runs() {
        // Rank 1 of 4, two QPs per peer: its own entries are 0.
        let q = [0x100, 0x101, 0, 0, 0x102, 0x103, 0x200, 0x201];
        let b = blob(&q, 1, 2);
        assert_eq!(b.runs.len(), 4, "{:?}", b.runs);
        let d = ConnBlob::decode(&b.encode()).unwrap();
        assert_eq!(d, b);
        for p in 0..4 {
            for k in 0..2 {
                assert_eq!(d.qpn(p, 0, k), Some(q[(p * 2 + u32::from(k)) as usize]));
            }
        }
        assert_eq!(d.qpn(4, 0, 0), None);
        assert_eq!(d.qpn(0, 0, 2), None);
        assert_eq!(d.qpn(0, 1, 0), None, "one rail");
    }

    #[test]
    fn two_rails_list_their_qps_rail_by_rail() {
        // Rank 0 of 2, two rails of one QP: peer 1's QPs 0x300 (rail 0) and 0x5000 (rail 1).
        let b = blob(&[0, 0, 0x300, 0x5000], 2, 1);
        let d = ConnBlob::decode(&b.encode()).unwrap();
        assert_eq!(
            (d.qpn(1, 0, 0), d.qpn(1, 1, 0)),
            (Some(0x300), Some(0x5000))
        );
        assert_eq!(d.rails[1].ring_rkey, 78);
        let one = blob(&[0, 0x10], 1, 1);
        assert_eq!(d.common_rails(&one), 1);
        assert!(d.same_fabric(&one));
    }

    #[test]
    fn fabrics_differ_by_link_layer_and_ib_subnet_prefix() {
        let mut a = blob(&[0, 5], 1, 1);
        let mut b = a.clone();
        assert!(a.same_fabric(&b));
        a.rails[0].link_layer = LinkLayer::InfiniBand;
        assert!(!a.same_fabric(&b));
        b.rails[0].link_layer = LinkLayer::InfiniBand;
        b.rails[0].gid.0[7] ^= 1;
        assert!(!a.same_fabric(&b), "another subnet prefix");
    }

    #[test]
    fn bad_blobs_are_refused_with_a_reason() {
        let good = blob(&[0, 0x300], 1, 1).encode();
        assert!(ConnBlob::decode(&good[..good.len() - 1]).is_err());
        let mut long = good.clone();
        long.push(0);
        assert!(ConnBlob::decode(&long).unwrap_err().contains("after"));
        let mut v = good.clone();
        v[2] = 9;
        assert!(ConnBlob::decode(&v).unwrap_err().contains("version"));
        let mut r = good.clone();
        r[3] = 0;
        assert!(ConnBlob::decode(&r).unwrap_err().contains("rails"));
        let mut m = good;
        m[23] = 7; // rail 0's MTU code
        assert!(ConnBlob::decode(&m).unwrap_err().contains("MTU"));
    }

    proptest! {
        #[test]
        fn the_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ConnBlob::decode(&b);
        }

        #[test]
        fn mutated_blobs_decode_or_fail_cleanly(i in 0usize..120, x in any::<u8>()) {
            let mut b = blob(&[0x10, 0, 0, 0x12, 0x13, 0x14, 0x15, 0x16], 2, 1).encode();
            let k = i % b.len();
            b[k] ^= x;
            if let Ok(d) = ConnBlob::decode(&b) {
                for p in 0..d.ranks.min(8) {
                    let _ = d.qpn(p, 0, 0);
                    let _ = d.qpn(p, 1, 0);
                }
            }
        }
    }
}
