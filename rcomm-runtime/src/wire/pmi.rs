//! PMI-1 and PMI-2 wire text, as spoken on `PMI_FD` by MPICH's hydra (`mpiexec.mpich`) and by
//! Slurm's pmi2 plugin (`srun --mpi=pmi2`, which answers both versions).
//!
//! PMI-1 is one line per message: `cmd=NAME key=value key=value\n`. PMI-2 (after a PMI-1-style
//! `cmd=init pmi_version=2` line) is a 6-character, space-padded decimal length followed by
//! `cmd=NAME;key=value;...;`, with a literal `;` inside a value written `;;`. Replies are parsed
//! as *sets* of key=value pairs, because the two servers order and word them differently (hydra:
//! `cmd=get_result rc=0 msg=success value=...`; Slurm: `cmd=get_result rc=0 value=...`).
//!
//! Every parser here returns an error on any input and never panics (proptested below);
//! lengths are bounded by [`MAX_MSG`].

use std::collections::HashMap;

/// Longest PMI message rcomm reads or writes. Both servers stay far below (hydra: 1024-byte
/// values, 64-byte keys); the bound keeps a confused peer from growing our buffer forever.
pub const MAX_MSG: usize = 64 * 1024;

/// Largest value rcomm reads back from the PMI store, in bytes (hex encoding doubles it on the
/// wire). rcomm's values (address records, the secret) are far smaller; a server whose chunks
/// add up to more is broken or hostile, and is refused before we fetch or keep the rest.
pub const MAX_VALUE: usize = crate::wire::MAX_FRAME_PAYLOAD;

/// A PMI parse failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PmiWireError {
    /// The text is not `key=value` pairs as expected.
    #[error("malformed PMI message {0:?}")]
    Malformed(String),
    /// A PMI-2 length prefix is not a number or is out of range.
    #[error("bad PMI-2 length prefix {0:?}")]
    BadLength(String),
    /// A value chunk set is incomplete or not hex.
    #[error("bad encoded value: {0}")]
    BadValue(String),
    /// The key is too long for the server's limit.
    #[error("key {key:?} is longer than the PMI server's limit of {max} characters")]
    KeyTooLong {
        /// The key.
        key: String,
        /// The limit.
        max: usize,
    },
}

/// The key=value pairs of one reply; the `cmd` is one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply(pub HashMap<String, String>);

impl Reply {
    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The reply's command name.
    pub fn cmd(&self) -> &str {
        self.get("cmd").unwrap_or("")
    }

    /// `rc`, where 0 (or no `rc` at all: hydra's `barrier_out` has none) means success.
    pub fn ok(&self) -> bool {
        self.get("rc").is_none_or(|rc| rc.trim() == "0")
    }

    /// A short description of a failed reply: its `msg`/`errmsg` if any, else the whole reply.
    pub fn why(&self) -> String {
        self.get("msg")
            .or_else(|| self.get("errmsg"))
            .map(str::to_string)
            .unwrap_or_else(|| format!("{:?}", self.0))
    }
}

/// Parses one PMI-1 reply line (without or with its newline): whitespace-separated `k=v` tokens.
/// Tokens without `=` are rejected, because a value containing a space would silently lose its
/// tail otherwise (rcomm never puts such values; see [`encode_value`]).
pub fn parse_v1(line: &str) -> Result<Reply, PmiWireError> {
    if line.len() > MAX_MSG {
        return Err(PmiWireError::Malformed(format!("{} bytes", line.len())));
    }
    let mut map = HashMap::new();
    for tok in line.split_ascii_whitespace() {
        let (k, v) = tok
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| PmiWireError::Malformed(line.to_string()))?;
        map.insert(k.to_string(), v.to_string());
    }
    if !map.contains_key("cmd") {
        return Err(PmiWireError::Malformed(line.to_string()));
    }
    Ok(Reply(map))
}

/// Builds one PMI-1 command line: `cmd=NAME k=v ...\n`.
pub fn format_v1(cmd: &str, args: &[(&str, &str)]) -> String {
    let mut s = format!("cmd={cmd}");
    for (k, v) in args {
        s.push_str(&format!(" {k}={v}"));
    }
    s.push('\n');
    s
}

/// Builds one PMI-2 message, length prefix included: `NNNNNNcmd=NAME;k=v;...;`.
pub fn format_v2(cmd: &str, args: &[(&str, &str)]) -> String {
    let mut body = format!("cmd={cmd};");
    for (k, v) in args {
        body.push_str(k);
        body.push('=');
        body.push_str(&v.replace(';', ";;"));
        body.push(';');
    }
    format!("{:<6}{body}", body.len())
}

/// Parses a PMI-2 length prefix (6 characters, decimal, space padded on either side).
pub fn parse_v2_len(prefix: &[u8]) -> Result<usize, PmiWireError> {
    let bad = || PmiWireError::BadLength(String::from_utf8_lossy(prefix).into_owned());
    let s = std::str::from_utf8(prefix).map_err(|_| bad())?;
    let n: usize = s.trim().parse().map_err(|_| bad())?;
    if prefix.len() != 6 || n > MAX_MSG {
        return Err(bad());
    }
    Ok(n)
}

/// Parses a PMI-2 message body: `k=v;k=v;...` (trailing `;` optional, `;;` is a literal `;`).
pub fn parse_v2(body: &str) -> Result<Reply, PmiWireError> {
    if body.len() > MAX_MSG {
        return Err(PmiWireError::Malformed(format!("{} bytes", body.len())));
    }
    let mut map = HashMap::new();
    let mut cur = String::new();
    let mut chars = body.chars().peekable();
    let mut finish = |cur: &mut String| -> Result<(), PmiWireError> {
        if cur.is_empty() {
            return Ok(());
        }
        let (k, v) = cur
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| PmiWireError::Malformed(body.to_string()))?;
        map.insert(k.to_string(), v.to_string());
        cur.clear();
        Ok(())
    };
    while let Some(c) = chars.next() {
        if c == ';' {
            if chars.peek() == Some(&';') {
                chars.next();
                cur.push(';');
            } else {
                finish(&mut cur)?;
            }
        } else {
            cur.push(c);
        }
    }
    finish(&mut cur)?;
    if !map.contains_key("cmd") {
        return Err(PmiWireError::Malformed(body.to_string()));
    }
    Ok(Reply(map))
}

/// The PMI key under which `rank`'s value `key` (chunk `i`) is stored. PMI's store is one flat
/// namespace for the job, so the rank is part of the key.
pub fn chunk_key(rank: u32, key: &str, i: usize) -> String {
    if i == 0 {
        format!("rc{rank}.{key}")
    } else {
        format!("rc{rank}.{key}.{i}")
    }
}

/// Hex characters of payload per chunk for a server whose values may be `vallen_max` long.
/// One less than the limit (C servers count the NUL), and at most 512 so a whole PMI-1 line
/// (command, kvsname, key and value) stays within hydra's and Slurm's line buffers.
pub fn chunk_len(vallen_max: usize) -> usize {
    vallen_max.saturating_sub(1).clamp(8, 512)
}

/// Encodes `val` for the PMI store: lowercase hex (safe in both wire formats: no space, `;`,
/// `=` or newline), split into chunks of at most `chunk_len(vallen_max)` characters. The first
/// chunk starts with the chunk count and a `,`, so a reader knows how many keys to fetch.
pub fn encode_value(val: &[u8], vallen_max: usize) -> Vec<String> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let per = chunk_len(vallen_max);
    let hex: Vec<u8> = val
        .iter()
        .flat_map(|b| [HEX[(b >> 4) as usize], HEX[(b & 15) as usize]])
        .collect();
    // The header takes room in chunk 0: size the count for the worst case, then recount.
    let mut n = 1;
    loop {
        let head = format!("{n},").len();
        let room0 = per.saturating_sub(head).max(2) & !1;
        let rest = hex.len().saturating_sub(room0);
        let need = 1 + rest.div_ceil(per & !1);
        if need <= n {
            break;
        }
        n = need;
    }
    let head = format!("{n},");
    let room0 = per.saturating_sub(head.len()).max(2) & !1;
    let first = hex.len().min(room0);
    let mut out = vec![format!("{head}{}", String::from_utf8_lossy(&hex[..first]))];
    for c in hex[first..].chunks(per & !1) {
        out.push(String::from_utf8_lossy(c).into_owned());
    }
    // Pad with empty chunks if the worst-case count overshot (keeps the header truthful).
    while out.len() < n {
        out.push(String::new());
    }
    out
}

/// Reads the chunk count from the first chunk of an encoded value.
pub fn chunk_count(first: &str) -> Result<usize, PmiWireError> {
    let (n, _) = first
        .split_once(',')
        .ok_or_else(|| PmiWireError::BadValue("no chunk count".into()))?;
    n.parse::<usize>()
        .ok()
        .filter(|&n| (1..=MAX_MSG).contains(&n))
        .ok_or_else(|| PmiWireError::BadValue(format!("chunk count {n:?}")))
}

/// Joins the chunks [`encode_value`] made back into the bytes.
pub fn decode_value(chunks: &[String]) -> Result<Vec<u8>, PmiWireError> {
    let first = chunks
        .first()
        .ok_or_else(|| PmiWireError::BadValue("no chunks".into()))?;
    let n = chunk_count(first)?;
    if n != chunks.len() {
        return Err(PmiWireError::BadValue(format!(
            "{} chunks, header says {n}",
            chunks.len()
        )));
    }
    let total: usize = chunks.iter().map(String::len).sum();
    if total > 2 * MAX_VALUE + first.len() {
        return Err(PmiWireError::BadValue(format!(
            "{total} characters, more than a value of {MAX_VALUE} bytes takes"
        )));
    }
    let head = first.find(',').map_or(0, |i| i + 1);
    let mut hex = first[head..].to_string();
    for c in &chunks[1..] {
        hex.push_str(c);
    }
    if hex.len() % 2 != 0 {
        return Err(PmiWireError::BadValue("odd hex length".into()));
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    hex.as_bytes()
        .chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| PmiWireError::BadValue("not hex".into()))
}

/// One `(first node, node count, ranks per node)` block of `PMI_process_mapping`.
pub type MapBlock = (u64, u64, u64);

/// Parses `PMI_process_mapping`, e.g. `(vector,(0,1,4))` or `(vector,(0,2,2),(2,1,3))`;
/// whitespace is ignored. An empty vector `(vector)` parses as no blocks.
pub fn parse_process_mapping(s: &str) -> Result<Vec<MapBlock>, PmiWireError> {
    let bad = || PmiWireError::Malformed(format!("PMI_process_mapping {s:?}"));
    if s.len() > MAX_MSG {
        return Err(bad());
    }
    let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = t
        .strip_prefix("(vector")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(bad)?;
    let mut blocks = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        rest = rest.strip_prefix(",(").ok_or_else(bad)?;
        let end = rest.find(')').ok_or_else(bad)?;
        let nums: Vec<u64> = rest[..end]
            .split(',')
            .map(|n| n.parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let [a, b, c] = nums[..] else {
            return Err(bad());
        };
        blocks.push((a, b, c));
        rest = &rest[end + 1..];
    }
    Ok(blocks)
}

/// The node index of every rank of a job of `size` ranks, from mapping blocks. As MPICH reads
/// it, the vector repeats until every rank is placed (hydra says `(vector,(0,1,1))` for two
/// ranks on one host: node 0 holds one rank per round). `None` when the blocks place nobody.
pub fn node_of_ranks(blocks: &[MapBlock], size: u32) -> Option<Vec<u64>> {
    let size = size as usize;
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        let before = out.len();
        for &(start, count, ppn) in blocks {
            if ppn == 0 {
                continue;
            }
            // Each node of the block places ≥ 1 rank, so this loop runs at most `size` times.
            for n in 0..count {
                if out.len() == size {
                    break;
                }
                let node = start.checked_add(n)?;
                let take = (ppn.min((size - out.len()) as u64)) as usize;
                out.extend(std::iter::repeat_n(node, take));
            }
        }
        if out.len() == before {
            return None;
        }
    }
    Some(out)
}

/// `(local rank, local size)` of `rank` from `PMI_process_mapping`, or `None` if it cannot say.
pub fn local_from_mapping(mapping: &str, rank: u32, size: u32) -> Option<(u32, u32)> {
    let blocks = parse_process_mapping(mapping).ok()?;
    let nodes = node_of_ranks(&blocks, size)?;
    let mine = *nodes.get(rank as usize)?;
    let local_rank = nodes[..rank as usize]
        .iter()
        .filter(|&&n| n == mine)
        .count();
    let local_size = nodes.iter().filter(|&&n| n == mine).count();
    Some((local_rank as u32, local_size as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hydra_and_slurm_pmi1_replies_parse_alike() {
        // Captured from mpiexec.mpich (hydra, MPICH 4.0) and srun --mpi=pmi2 (Slurm 22.05).
        let hydra = parse_v1("cmd=get_result rc=0 msg=success value=tcp://host-of-0:7000").unwrap();
        let slurm = parse_v1("cmd=get_result value=tcp://host-of-0:7000 rc=0\n").unwrap();
        for r in [&hydra, &slurm] {
            assert_eq!((r.cmd(), r.ok()), ("get_result", true));
            assert_eq!(r.get("value"), Some("tcp://host-of-0:7000"));
        }
        let miss =
            parse_v1("cmd=get_result rc=-1 msg=key_no-such-key_not_found value=unknown").unwrap();
        assert!(!miss.ok());
        assert!(miss.why().contains("not_found"));
        let maxes = parse_v1("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024").unwrap();
        assert_eq!(maxes.get("vallen_max"), Some("1024"));
        assert!(parse_v1("cmd=barrier_out").unwrap().ok());
        assert!(parse_v1("cmd=put_result rc=0 msg=success").unwrap().ok());
        assert!(parse_v1("rc=0").is_err());
        assert!(parse_v1("cmd=x garbage").is_err());
    }

    #[test]
    fn pmi2_replies_parse_with_escapes() {
        let r = parse_v2(
            "cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=1;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;",
        )
        .unwrap();
        assert_eq!(
            (r.cmd(), r.get("rank"), r.get("size")),
            ("fullinit-response", Some("1"), Some("2"))
        );
        let r = parse_v2("cmd=kvs-get-response;found=TRUE;value=a;;b;rc=0;").unwrap();
        assert_eq!(r.get("value"), Some("a;b"));
        let r = parse_v2("cmd=kvs-get-response;found=FALSE;rc=0;").unwrap();
        assert_eq!(r.get("found"), Some("FALSE"));
        assert!(parse_v2("found=TRUE;").is_err());
        assert_eq!(
            format_v2("kvs-put", &[("key", "k"), ("value", "x;y")]),
            "29    cmd=kvs-put;key=k;value=x;;y;"
        );
        assert_eq!(parse_v2_len(b"38    ").unwrap(), 38);
        assert!(parse_v2_len(b"3x    ").is_err());
        assert!(parse_v2_len(b"999999").is_err());
    }

    #[test]
    fn mappings_as_launchers_write_them() {
        assert_eq!(local_from_mapping("(vector,(0,1,1))", 1, 2), Some((1, 2)));
        assert_eq!(local_from_mapping("(vector,(0,1,4))", 3, 4), Some((3, 4)));
        // Two nodes, two ranks each, block placement.
        assert_eq!(local_from_mapping("(vector,(0,2,2))", 2, 4), Some((0, 2)));
        assert_eq!(local_from_mapping("(vector, (0,2,1))", 3, 4), Some((1, 2)));
        assert_eq!(
            local_from_mapping("(vector,(0,2,2),(2,1,3))", 5, 7),
            Some((1, 3))
        );
        assert_eq!(local_from_mapping("(vector)", 0, 2), None);
        assert_eq!(local_from_mapping("(vector,(0,0,0))", 0, 2), None);
        assert_eq!(local_from_mapping("vector,(0,1,1)", 0, 2), None);
        assert_eq!(local_from_mapping("", 0, 2), None);
    }

    #[test]
    fn small_values_take_one_chunk() {
        let c = encode_value(b"hi", 1024);
        assert_eq!(c, vec!["1,6869".to_string()]);
        assert_eq!(decode_value(&c).unwrap(), b"hi");
        assert!(decode_value(&["2,00".into()]).is_err());
        assert!(decode_value(&["1,0g".into()]).is_err());
    }

    proptest! {
        #[test]
        fn values_round_trip_for_any_bytes_and_limits(
            val in proptest::collection::vec(any::<u8>(), 0..3000),
            vallen in 0usize..2000,
        ) {
            let chunks = encode_value(&val, vallen);
            for c in &chunks {
                prop_assert!(c.len() <= chunk_len(vallen).max(8), "{} > {}", c.len(), chunk_len(vallen));
                prop_assert!(c.bytes().all(|b| b.is_ascii_hexdigit() || b == b','));
            }
            prop_assert_eq!(chunk_count(&chunks[0]).unwrap(), chunks.len());
            prop_assert_eq!(decode_value(&chunks).unwrap(), val);
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,200}", b in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = parse_v1(&s);
            let _ = parse_v2(&s);
            let _ = parse_v2_len(&b);
            let _ = decode_value(std::slice::from_ref(&s));
            if let Ok(blocks) = parse_process_mapping(&s) {
                let _ = node_of_ranks(&blocks, 64);
            }
        }

        #[test]
        fn mapping_parser_never_panics_on_near_mappings(
            blocks in proptest::collection::vec((any::<u64>(), 0u64..5, 0u64..5), 0..5),
            size in 0u32..100,
            rank in 0u32..100,
            junk in "[(),0-9a-z ]{0,6}",
        ) {
            let mut s = String::from("(vector");
            for (a, b, c) in &blocks {
                s.push_str(&format!(",({a},{b},{c})"));
            }
            s.push(')');
            let parsed = parse_process_mapping(&s).unwrap();
            prop_assert_eq!(parsed.len(), blocks.len());
            if let Some((lr, ls)) = local_from_mapping(&s, rank, size) {
                prop_assert!(rank < size && lr < ls && ls <= size);
            }
            s.insert_str(s.len() / 2, &junk);
            let _ = local_from_mapping(&s, rank, size);
        }

        #[test]
        fn v2_messages_round_trip(k in "[a-z-]{1,10}", v in "[ -~]{0,40}") {
            let m = format_v2("x", &[(&k, &v)]);
            let n = parse_v2_len(&m.as_bytes()[..6]).unwrap();
            prop_assert_eq!(n, m.len() - 6);
            let r = parse_v2(&m[6..]).unwrap();
            if k != "cmd" {
                prop_assert_eq!(r.get(&k), Some(v.as_str()));
            }
        }
    }
}
