//! Fuzzing entry points: one function per decoder of bytes that rcomm reads from outside its
//! own process, shared by the `cargo fuzz` targets in `fuzz/`, the proptest fuzzers and the
//! corpus replay of `tests/decoders.rs` (and, for the launcher's control channel,
//! `rcomm_launcher::ctl::fuzzing`). Not part of the API.
//!
//! Each function takes arbitrary bytes — what a peer could send — and runs one decoder the way
//! its listener or client does (frames read from a stream with the listener's limit, then the
//! message decoded). It checks what must hold for every input: no panic, every limit respected,
//! and a message that decodes re-encodes to the same bytes (or at least to itself). A broken
//! invariant panics, which is what a fuzzer reports. Bounded allocation and time are checked
//! by the tests around these functions (a counting allocator and a clock), using
//! [`Target::max_alloc`].
//!
//! Inputs that are a *stream* (`frame`, `read_frame`, `handshake`, `kvs_*`, `tcp_frames`,
//! `local_recv`, `pmi_v1`, `pmi_v2`) are the bytes as they arrive on the socket; the others are
//! one message's payload (`header`, `addr_record`, `auth_response`, `tcp_hello`) or, for the
//! PMI helpers, text (`pmi_value`: chunks separated by newlines; `pmi_mapping`: two bytes of
//! job size and rank, then the mapping).

use rcomm_runtime::auth::{self, Deadline, Secret};
use rcomm_runtime::identity::PeerInfo;
use rcomm_runtime::wire::{
    self, AddrRecord, AuthResponse, EndpointAddr, Header, KvsReply, KvsRequest, MAX_FRAME_PAYLOAD,
    ProtoKind, pmi,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// One fuzz target.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Name: the `cargo fuzz` target and the folder of its corpus (`fuzz/corpus/<name>`).
    pub name: &'static str,
    /// What it decodes, for the inventory.
    pub what: &'static str,
    /// Runs the decoder on one input; panics only if an invariant breaks.
    pub run: fn(&[u8]),
    /// Most bytes the target may hold allocated at once for an input of `n` bytes: linear in
    /// what was received, never in what a length field announced.
    pub max_alloc: fn(usize) -> usize,
}

/// Every target of this crate.
pub const TARGETS: &[Target] = &[
    Target {
        name: "frame",
        what: "wire::decode_frame / decode_frame_header (every rcomm frame, in place)",
        run: frame,
        max_alloc: |n| 2 * n + 1024,
    },
    Target {
        name: "read_frame",
        what: "wire::read_frame from a stream, whole and a byte at a time",
        run: read_frame,
        max_alloc: |n| 4 * n + 2 * wire::READ_FRAME_STEP,
    },
    Target {
        name: "handshake",
        what: "auth::accept and auth::connect fed the peer's side of the handshake",
        run: handshake,
        max_alloc: |n| 4 * n + 16 * 1024,
    },
    Target {
        name: "auth_response",
        what: "wire::AuthResponse::decode (handshake response payload)",
        run: auth_response,
        max_alloc: |_| 4096,
    },
    Target {
        name: "kvs_request",
        what: "KVS / store requests as the server reads them (frames, then KvsRequest::decode)",
        run: kvs_request,
        max_alloc: |n| 8 * n + 2 * wire::READ_FRAME_STEP,
    },
    Target {
        name: "kvs_reply",
        what: "KVS / store replies and notices as a rank reads them (KvsReply::decode)",
        run: kvs_reply,
        max_alloc: |n| 8 * n + 2 * wire::READ_FRAME_STEP,
    },
    Target {
        name: "addr_record",
        what: "wire::AddrRecord::decode with identity::PeerInfo (bootstrap values)",
        run: addr_record,
        max_alloc: |n| 8 * n + 16 * 1024,
    },
    Target {
        name: "header",
        what: "wire::Header::decode (data-plane message header)",
        run: header,
        max_alloc: |_| 4096,
    },
    Target {
        name: "tcp_hello",
        what: "tcp::Hello::decode (the sender's hello after authentication)",
        run: tcp_hello,
        max_alloc: |_| 4096,
    },
    Target {
        name: "tcp_frames",
        what: "tcp FrameBuf: data frames cut from a stream in arbitrary reads, chunk prefixes",
        run: tcp_frames,
        max_alloc: |n| 2 * n + 80 * 1024,
    },
    Target {
        name: "local_recv",
        what: "local::LocalConn::recv on a Unix socket (local-channel frames)",
        run: local_recv,
        max_alloc: |n| 4 * n + 80 * 1024,
    },
    Target {
        name: "pmi_v1",
        what: "PMI-1 reply lines (wire::pmi::parse_v1), split as the client reads them",
        run: pmi_v1,
        max_alloc: |n| 96 * n + 16 * 1024,
    },
    Target {
        name: "pmi_v2",
        what: "PMI-2 replies: length prefix (parse_v2_len) and body (parse_v2)",
        run: pmi_v2,
        max_alloc: |n| 96 * n + 16 * 1024,
    },
    Target {
        name: "pmi_value",
        what: "values read back from the PMI store (wire::pmi::decode_value, chunk_count)",
        run: pmi_value,
        max_alloc: |n| 16 * n + 16 * 1024,
    },
    Target {
        name: "flight_dump",
        what: "wire::FlightDump::decode (a rank's flight recorder, read by rcomm-run)",
        run: flight_dump,
        max_alloc: |n| 16 * n + 4096,
    },
    Target {
        name: "topo_json",
        what: "topo::Topology::from_json (RCOMM_TOPO_FILE) with its validation",
        run: topo_json,
        max_alloc: |n| 64 * n + 64 * 1024,
    },
    Target {
        name: "ib_blob",
        what: "ib::conn::ConnBlob::decode (the ib connection blob of a peer's address record)",
        run: ib_blob,
        max_alloc: |n| 4 * n + 1024,
    },
    Target {
        name: "pmi_mapping",
        what: "PMI_process_mapping (parse_process_mapping, node_of_ranks, local_from_mapping)",
        run: pmi_mapping,
        max_alloc: |n| 16 * n + 64 * 1024,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Frames read from `data` as a listener reads them, until the stream ends or breaks.
fn frames(data: &[u8], limit: usize, mut f: impl FnMut(u8, &[u8])) {
    let mut r = data;
    loop {
        match wire::read_frame(&mut r, limit) {
            Ok((kind, payload)) => {
                assert!(payload.len() <= limit, "frame over its limit");
                f(kind, &payload);
            }
            Err(_) => return,
        }
    }
}

/// `wire::decode_frame` over a buffer, frame after frame, with a small and the usual limit.
pub fn frame(data: &[u8]) {
    for limit in [256, MAX_FRAME_PAYLOAD] {
        let mut rest = data;
        while let Ok(Some((h, payload, used))) = wire::decode_frame(rest, limit) {
            assert!(h.len <= limit && payload.len() == h.len);
            assert_eq!(used, wire::FRAME_HEADER_LEN + h.len);
            assert_eq!(wire::encode_frame(h.kind, payload), rest[..used]);
            rest = &rest[used..];
        }
    }
    if let Some(h) = data.first_chunk::<{ wire::FRAME_HEADER_LEN }>()
        && let Ok(fh) = wire::decode_frame_header(h, MAX_FRAME_PAYLOAD)
    {
        assert!(fh.len <= MAX_FRAME_PAYLOAD);
    }
}

/// A reader that hands out at most one byte per call, as a slow peer would.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || self.0.is_empty() {
            return Ok(0);
        }
        buf[0] = self.0[0];
        self.0 = &self.0[1..];
        Ok(1)
    }
}

/// `wire::read_frame` on a stream, until it ends or breaks; whole reads and one-byte reads
/// must see the same frames.
pub fn read_frame(data: &[u8]) {
    for limit in [64, 256, MAX_FRAME_PAYLOAD] {
        let mut whole = Vec::new();
        frames(data, limit, |k, p| whole.push((k, p.to_vec())));
        let mut slow = Vec::new();
        let mut r = Trickle(data);
        while let Ok(f) = wire::read_frame(&mut r, limit) {
            slow.push(f);
        }
        assert_eq!(whole, slow, "frames depend on how the bytes were cut");
    }
}

/// A stream that yields `input` and swallows what is written; its deadlines are no-ops (the
/// input ends instead of timing out).
struct Scripted<'a> {
    input: &'a [u8],
    written: usize,
}

impl Read for Scripted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Scripted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Deadline for Scripted<'_> {
    fn set_deadline(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

/// The handshake with `data` as everything the peer says: as server (data = the client's
/// response) and as client (data = the server's challenge and proof). Nobody without the
/// secret can pass either side, so both must fail, cleanly.
pub fn handshake(data: &[u8]) {
    let secret = Secret::from_bytes([0x5a; auth::SECRET_LEN]);
    let mut s = Scripted {
        input: data,
        written: 0,
    };
    assert!(
        auth::accept(&mut s, &secret, "kvs").is_err(),
        "a forged response passed"
    );
    let mut c = Scripted {
        input: data,
        written: 0,
    };
    assert!(
        auth::connect(&mut c, &secret, "kvs", 3).is_err(),
        "a forged proof passed"
    );
}

/// `AuthResponse::decode`; what decodes re-encodes to the same bytes.
pub fn auth_response(data: &[u8]) {
    if let Ok(r) = AuthResponse::decode(data) {
        assert_eq!(r.encode(), data);
    }
}

/// KVS requests as the server reads them after the handshake.
pub fn kvs_request(data: &[u8]) {
    frames(data, MAX_FRAME_PAYLOAD, |kind, payload| {
        if let Ok(r) = KvsRequest::decode(kind, payload) {
            // Canonical: the same message has one encoding.
            assert_eq!(r.to_frame(), wire::encode_frame(kind, payload));
        }
    });
}

/// KVS replies and notices as a rank's reader thread reads them.
pub fn kvs_reply(data: &[u8]) {
    frames(data, MAX_FRAME_PAYLOAD, |kind, payload| {
        if let Ok(r) = KvsReply::decode(kind, payload) {
            assert_eq!(r.to_frame(), wire::encode_frame(kind, payload));
            let _ = r.is_notice();
        }
    });
}

/// `FlightDump::decode`: every limit holds, and what decodes encodes to a dump that decodes
/// to the same records (the encoding of the name table is the encoder's own).
pub fn flight_dump(data: &[u8]) {
    if let Ok(d) = wire::FlightDump::decode(data) {
        assert!(d.records.len() <= wire::MAX_DUMP_RECORDS);
        let again = wire::FlightDump::decode(&d.encode()).expect("a decoded dump re-encodes");
        assert_eq!(again.records.len(), d.records.len());
        assert_eq!(
            (again.rank, again.now_us, &again.comms),
            (d.rank, d.now_us, &d.comms)
        );
    }
}

/// `AddrRecord::decode` (and the `PeerInfo` inside); canonical.
pub fn addr_record(data: &[u8]) {
    if let Ok(r) = AddrRecord::decode(data) {
        assert!(r.endpoints.len() <= wire::MAX_ENDPOINTS);
        assert!(r.info.settings.len() <= wire::MAX_SETTINGS);
        assert_eq!(r.encode(), data);
    }
}

/// `ConnBlob::decode`: canonical, and every QP number it promises can be looked up.
pub fn ib_blob(data: &[u8]) {
    if let Ok(b) = crate::ib::conn::ConnBlob::decode(data) {
        assert_eq!(b.encode(), data);
        for p in 0..b.ranks.min(64) {
            for rail in 0..b.rails.len() {
                for k in 0..b.qps {
                    assert!(b.qpn(p, rail, k).is_some(), "rank {p} rail {rail} QP {k}");
                }
            }
        }
    }
}

/// `Header::decode` from the front of the bytes; the 40 bytes it read re-encode exactly.
pub fn header(data: &[u8]) {
    if let Ok(h) = Header::decode(data) {
        assert_eq!(h.encode()[..], data[..Header::LEN]);
    }
}

/// `tcp::Hello::decode`; canonical.
pub fn tcp_hello(data: &[u8]) {
    if let Ok(h) = crate::tcp::Hello::decode(data) {
        assert_eq!(h.encode(), data);
    }
}

/// The TCP receive buffer fed a stream in arbitrary pieces (see `tcp::frame`).
pub fn tcp_frames(data: &[u8]) {
    crate::tcp::fuzz_frames(data);
}

/// `LocalConn::recv` on a Unix socket that carries `data`, then end-of-file.
pub fn local_recv(data: &[u8]) {
    crate::local::fuzz_recv(data);
}

/// PMI-1 reply lines, cut at newlines as the client cuts them.
pub fn pmi_v1(data: &[u8]) {
    for line in data.split_inclusive(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(line);
        if let Ok(r) = pmi::parse_v1(&text) {
            assert!(r.get("cmd").is_some());
            let _ = (r.cmd(), r.ok(), r.why());
        }
    }
}

/// PMI-2 replies: a 6-character length, then that many bytes of body, again and again.
pub fn pmi_v2(data: &[u8]) {
    let mut rest = data;
    while let Some(prefix) = rest.get(..6) {
        let Ok(n) = pmi::parse_v2_len(prefix) else {
            return;
        };
        assert!(n <= pmi::MAX_MSG);
        let Some(body) = rest.get(6..6 + n) else {
            return;
        };
        if let Ok(r) = pmi::parse_v2(&String::from_utf8_lossy(body)) {
            assert!(r.get("cmd").is_some());
            let _ = (r.cmd(), r.ok(), r.why());
        }
        rest = &rest[6 + n..];
    }
}

/// A value read back from the PMI store: newline-separated chunks.
pub fn pmi_value(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let chunks: Vec<String> = text.split('\n').map(str::to_string).collect();
    let _ = pmi::chunk_count(&chunks[0]);
    if let Ok(v) = pmi::decode_value(&chunks) {
        assert!(v.len() <= pmi::MAX_VALUE);
        assert_eq!(pmi::decode_value(&pmi::encode_value(&v, 1024)), Ok(v));
    }
}

/// `PMI_process_mapping` for a job of up to 1024 ranks (first byte × 4) and one rank of it.
pub fn pmi_mapping(data: &[u8]) {
    let [a, b, rest @ ..] = data else {
        return;
    };
    let size = u32::from(*a) * 4;
    let rank = u32::from(*b) * 4 % size.max(1);
    let text = String::from_utf8_lossy(rest);
    if let Ok(blocks) = pmi::parse_process_mapping(&text)
        && let Some(nodes) = pmi::node_of_ranks(&blocks, size)
    {
        assert_eq!(nodes.len(), size as usize);
    }
    if let Some((lr, ls)) = pmi::local_from_mapping(&text, rank, size) {
        assert!(lr < ls && ls <= size);
    }
}

/// `Topology::from_json`: what it accepts is valid, and writes back to JSON that reads back to
/// the same topology.
pub fn topo_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = rcomm_runtime::topo::Topology::from_json(text) {
        assert_eq!(t.validate(), Ok(()));
        // Validation refuses non-finite rates, so whatever is accepted writes back.
        let again = rcomm_runtime::topo::Topology::from_json(&t.to_json());
        assert_eq!(again.expect("an accepted topology re-reads"), t);
    }
}

/// A small machine for the `topo_json` seed: a package, a NUMA node, a core with two PUs, a
/// cache, and a NIC on a host bridge.
fn sample_topology() -> rcomm_runtime::topo::Topology {
    use rcomm_runtime::topo::{Cache, ObjKind, OsDevKind, PciAddr, PcieLink, Source, Topology};
    let mut t = Topology::new(Source::Manual, "node1");
    let p = t.add(Topology::MACHINE, ObjKind::Package, Some(0), "");
    let n = t.add(
        p,
        ObjKind::NumaNode {
            memory_bytes: 1 << 30,
        },
        Some(0),
        "",
    );
    let c = t.add(n, ObjKind::Core, Some(0), "");
    t.add(c, ObjKind::Pu, Some(0), "");
    t.add(c, ObjKind::Pu, Some(1), "");
    let hb = t.add(n, ObjKind::HostBridge, None, "");
    let addr = PciAddr {
        domain: 0,
        bus: 1,
        dev: 0,
        func: 0,
    };
    let link = Some(PcieLink {
        gts: 16.0,
        width: 8,
    });
    let nic = ObjKind::PciDevice {
        addr,
        class: 0x0200,
        vendor: 0x8086,
        device: 0x159b,
        link,
    };
    let f = t.add(hb, nic, None, "");
    let net = ObjKind::OsDevice {
        kind: OsDevKind::Net {
            speed_mbps: Some(25_000),
        },
    };
    t.add(f, net, None, "eth0");
    t.caches.push(Cache {
        level: 2,
        size_bytes: 1 << 20,
        cpuset: vec![0, 1],
    });
    t.fill_cpusets();
    t
}

/// Valid samples of every target's input, the seeds of the corpus and of the structure-aware
/// mutations: `(target, sample name, bytes)`.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let info = PeerInfo {
        hostname: "node1".into(),
        boot_id: "0b1d".into(),
        netns: 4_026_531_840,
        uid: 1000,
        pid: 4242,
        version: "0.1.0".into(),
        settings: vec![
            ("RCOMM_TRANSPORT".into(), "auto".into()),
            ("RCOMM_SHM_CMA".into(), "1".into()),
        ],
    };
    let rec = AddrRecord {
        info,
        endpoints: vec![
            EndpointAddr::Tcp("10.77.0.1:40000".into()),
            EndpointAddr::Local("rcomm.job.0".into()),
            EndpointAddr::Other {
                kind: 9,
                data: vec![1, 2, 3],
            },
        ],
    };
    let hdr = Header {
        context: 1,
        source: 2,
        seq: 3,
        tag: -7,
        len: 1 << 20,
        kind: ProtoKind::RndvRts,
        flags: 1,
        coll_seq: 5,
        signature: 0xfeed,
    };
    let reqs: Vec<u8> = [
        KvsRequest::Put {
            key: "addr".into(),
            val: rec.encode(),
        },
        KvsRequest::Fence,
        KvsRequest::Get {
            rank: 1,
            key: "addr".into(),
        },
        KvsRequest::Abort {
            code: 3,
            msg: "bye".into(),
        },
        KvsRequest::Finalize,
        KvsRequest::Heartbeat,
        KvsRequest::Agree {
            key: "shrink/0/1".into(),
            members: vec![0, 2, 3],
            data: vec![0xff; 8],
        },
        KvsRequest::FlightDump {
            id: 0,
            why: "allreduce #4 on comm world: no progress for 3.0 s (RCOMM_TIMEOUT)".into(),
            dump: sample_dump().encode(),
        },
    ]
    .iter()
    .flat_map(KvsRequest::to_frame)
    .collect();
    let reps: Vec<u8> = [
        KvsReply::Ok,
        KvsReply::FenceDone,
        KvsReply::Value(b"v".to_vec()),
        KvsReply::NotFound,
        KvsReply::Error("no".into()),
        KvsReply::RankFailed {
            rank: 2,
            host: "node2".into(),
            how: "killed by signal 9 (SIGKILL)".into(),
        },
        KvsReply::Abort {
            from: 1,
            code: 7,
            msg: "abort".into(),
        },
        KvsReply::RankHung {
            rank: 2,
            silent_ms: 5000,
        },
        KvsReply::Agreed {
            failed: vec![1],
            data: vec![0x0f; 8],
        },
        KvsReply::DumpRequest { id: 3 },
    ]
    .iter()
    .flat_map(KvsReply::to_frame)
    .collect();
    let response = AuthResponse {
        client_id: 3,
        nonce: [1; wire::NONCE_LEN],
        mac: [2; wire::MAC_LEN],
    };
    let mut challenge_and_proof = wire::encode_frame(wire::auth_kind::CHALLENGE, &[9; 32]);
    challenge_and_proof.extend(wire::encode_frame(wire::auth_kind::PROOF, &[8; 32]));
    let hello = crate::tcp::Hello {
        dest: 1,
        index: 0,
        count: 2,
        max_frame: 1 << 19,
    };
    let mut tcp = vec![0x00, 0x04, 0x07]; // limit 1024, piece seed 7
    for (i, n) in [0usize, 5, 40, 700].into_iter().enumerate() {
        let h = Header {
            seq: i as u32,
            kind: if i % 2 == 0 {
                ProtoKind::Eager
            } else {
                ProtoKind::Data
            },
            ..hdr
        };
        tcp.extend_from_slice(&h.encode());
        tcp.extend_from_slice(&(n as u32).to_le_bytes());
        tcp.extend((0..n).map(|j| j as u8));
    }
    let mut local = wire::encode_frame(1, &7u32.to_le_bytes());
    local.extend(wire::encode_frame(2, b"ring"));
    let v2 = [
        pmi::format_v2(
            "fullinit-response",
            &[("rank", "1"), ("size", "2"), ("rc", "0")],
        ),
        pmi::format_v2(
            "kvs-get-response",
            &[("found", "TRUE"), ("value", "a;b"), ("rc", "0")],
        ),
    ]
    .concat();
    let mut mapping = vec![2u8, 1];
    mapping.extend_from_slice(b"(vector,(0,2,2),(2,1,3))");
    let value = pmi::encode_value(&rec.encode(), 64).join("\n");
    vec![
        ("frame", "kvs_put", KvsRequest::Fence.to_frame()),
        ("frame", "two_frames", reqs.clone()),
        ("read_frame", "requests", reqs.clone()),
        ("read_frame", "challenge", challenge_and_proof.clone()),
        (
            "handshake",
            "response",
            wire::encode_frame(wire::auth_kind::RESPONSE, &response.encode()),
        ),
        ("handshake", "challenge_proof", challenge_and_proof),
        ("auth_response", "response", response.encode()),
        ("kvs_request", "all", reqs),
        ("kvs_reply", "all", reps),
        ("addr_record", "record", rec.encode()),
        ("header", "rts", hdr.encode().to_vec()),
        ("tcp_hello", "hello", hello.encode()),
        ("tcp_frames", "four_frames", tcp),
        ("local_recv", "two_frames", local),
        (
            "pmi_v1",
            "hydra",
            b"cmd=get_result rc=0 msg=success value=1,abcd\ncmd=barrier_out\ncmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n".to_vec(),
        ),
        ("pmi_v2", "replies", v2.into_bytes()),
        ("pmi_value", "record", value.into_bytes()),
        ("pmi_mapping", "two_blocks", mapping),
        ("flight_dump", "dump", sample_dump().encode()),
        ("topo_json", "small", sample_topology().to_json().into_bytes()),
        ("ib_blob", "two_rails", sample_ib_blob().encode()),
    ]
}

/// Rank 1 of 3 with two RoCE rails of two QPs each.
fn sample_ib_blob() -> crate::ib::conn::ConnBlob {
    use crate::ib::conn::{ConnBlob, RailAddr};
    use crate::ib::verbs::{Gid, LinkLayer, Mtu};
    let rail = |i: u8| RailAddr {
        link_layer: LinkLayer::Ethernet,
        lid: 0,
        gid: Gid::from_ipv4(std::net::Ipv4Addr::new(10, i, 0, 2)),
        mtu: Mtu::M4096,
        ring_rkey: 0x1000 + u32::from(i),
    };
    let qpns = [
        0x100, 0x101, 0x900, 0x901, 0, 0, 0, 0, 0x102, 0x103, 0x902, 0x903,
    ];
    ConnBlob::new(
        vec![rail(0), rail(1)],
        0xabcde,
        0x7f00_0000_0000,
        (32, 8236),
        2,
        &qpns,
    )
}

/// A rank's flight recorder as a launcher receives it: two communicators, a collective
/// waiting, a receive waiting.
fn sample_dump() -> wire::FlightDump {
    let rec = |id: u64, seq: u64, op: &str, state: &str| wire::DumpRecord {
        id,
        ctx: if seq > 0 { 4 } else { 1 },
        comm_first: 4,
        comm_size: 4,
        seq,
        op: op.into(),
        dtype: "f32".into(),
        redop: if op == "allreduce" { "sum" } else { "" }.into(),
        algo: rcomm_runtime::algo::Algo::Ring.name().into(),
        bytes: 4096,
        peer: if seq > 0 { u32::MAX } else { 2 },
        state: state.into(),
        start_us: 1_000 * id,
        end_us: if state == "done" { 1_000 * id + 7 } else { 0 },
    };
    wire::FlightDump {
        rank: 5,
        host: "host2".into(),
        pid: 4242,
        now_us: 9_000_000,
        total: 3,
        comms: vec![(0, "world".into()), (4, "tp".into())],
        records: vec![
            rec(1, 41, "allreduce", "done"),
            rec(2, 42, "allreduce", "waiting"),
            rec(3, 0, "recv", "waiting"),
        ],
    }
}

/// Inputs that must be refused, one per way of being wrong that the listeners meet: garbage,
/// truncation, an oversized length, a wrong version. Added to the corpus beside the seeds.
pub fn invalid_samples() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut huge = wire::encode_frame(1, b"");
    huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut version = KvsRequest::Fence.to_frame();
    version[2] = 99;
    let put = KvsRequest::Put {
        key: "k".into(),
        val: vec![1; 32],
    }
    .to_frame();
    let mut lying_len = put.clone();
    // The value's own length prefix claims 4 GiB inside a small frame.
    let at = wire::FRAME_HEADER_LEN + 4 + 1;
    lying_len[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut tcp_huge = vec![0x00, 0x04, 0x01];
    tcp_huge.extend_from_slice(&[0; Header::LEN]);
    tcp_huge.extend_from_slice(&u32::MAX.to_le_bytes());
    let mut out = vec![];
    for t in [
        "frame",
        "read_frame",
        "kvs_request",
        "kvs_reply",
        "local_recv",
    ] {
        out.push((t, "garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()));
        out.push((t, "oversized", huge.clone()));
        out.push((t, "version", version.clone()));
        out.push((t, "truncated", put[..put.len() - 3].to_vec()));
    }
    out.push(("kvs_request", "lying_length", lying_len));
    out.push(("handshake", "oversized", huge));
    out.push(("handshake", "garbage", b"\x16\x03\x01\x02\x00".to_vec()));
    out.push(("tcp_frames", "oversized", tcp_huge));
    out.push(("pmi_v2", "bad_length", b"99999999cmd=x;".to_vec()));
    out.push(("pmi_value", "many_chunks", b"65536,00\n00".to_vec()));
    out.push((
        "pmi_mapping",
        "huge_counts",
        [
            &[255u8, 3][..],
            b"(vector,(18446744073709551615,18446744073709551615,0))",
        ]
        .concat(),
    ));
    out
}

/// Derives a mutated input from `seed` with the random words `rnd`: truncation, bit flips,
/// huge or zero 32-bit fields (where lengths live), inserted and deleted bytes, duplicated
/// tails. What a structure-aware fuzzer would try first.
pub fn mutate(seed: &[u8], rnd: &[u64]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for &r in rnd {
        let pos = |len: usize| if len == 0 { 0 } else { (r >> 8) as usize % len };
        match r % 7 {
            0 => {
                let at = pos(v.len() + 1);
                v.truncate(at);
            }
            1 => {
                if !v.is_empty() {
                    let at = pos(v.len());
                    v[at] ^= 1 << ((r >> 40) % 8);
                }
            }
            2 | 3 => {
                if v.len() >= 4 {
                    let at = pos(v.len() - 3);
                    let val: u32 = match (r >> 40) % 4 {
                        0 => u32::MAX,
                        1 => 0,
                        2 => (MAX_FRAME_PAYLOAD + 1) as u32,
                        _ => (r >> 32) as u32,
                    };
                    v[at..at + 4].copy_from_slice(&val.to_le_bytes());
                }
            }
            4 => {
                let at = pos(v.len() + 1);
                v.insert(at, (r >> 48) as u8);
            }
            5 => {
                if !v.is_empty() {
                    let at = pos(v.len());
                    v.remove(at);
                }
            }
            _ => {
                if v.len() < 1 << 16 {
                    let at = pos(v.len() + 1);
                    let tail = v[at..].to_vec();
                    v.extend_from_slice(&tail);
                }
            }
        }
    }
    v
}

/// Runs `target` on every file of `dir` (a corpus folder); returns how many it ran. A missing
/// folder is an error, so a renamed target cannot silently lose its corpus.
pub fn replay_dir(target: &Target, dir: &std::path::Path) -> io::Result<usize> {
    let mut n = 0;
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for f in files {
        let data = std::fs::read(&f)?;
        (target.run)(&data);
        n += 1;
    }
    Ok(n)
}

// Shared by the in-CI fuzzers of every crate (rcomm-transport/tests/decoders.rs,
// rcomm-launcher/tests/ctl_decoders.rs).

/// Longest one decoder call may take on one input (they take microseconds; this is a hang).
pub const HANG: Duration = Duration::from_secs(2);

/// A global allocator that counts, per thread, the bytes held at once while a decoder runs:
/// install it in a test binary (`#[global_allocator] static A: Counting = Counting;`) and call
/// [`check`].
pub struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(n: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + n;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// thread-local cells with constant initialisers, which neither allocate nor need destructors.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            count(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            count(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { System.dealloc(p, l) };
        count(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: `p` came from this allocator with layout `l`.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            count(new as isize - l.size() as isize);
        }
        q
    }
}

/// Runs one target on one input and checks its allocation (meaningful only where [`Counting`]
/// is the global allocator) and time bounds.
pub fn check(t: &Target, data: &[u8]) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    let t0 = Instant::now();
    (t.run)(data);
    let took = t0.elapsed();
    let peak = PEAK.with(Cell::get).max(0) as usize;
    let limit = (t.max_alloc)(data.len());
    assert!(
        peak <= limit,
        "{}: {peak} bytes allocated at once for an input of {} bytes (limit {limit}): {:02x?}",
        t.name,
        data.len(),
        &data[..data.len().min(64)]
    );
    assert!(took < HANG, "{}: {took:?} on {} bytes", t.name, data.len());
}
