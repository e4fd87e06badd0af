//! Checks of a multi-node launch's placement, run inside rank programs (`rt_table`,
//! `rt_check`): every rank's node as the launch set it, `same_node` and `nodes()` against it,
//! and that a collective ran the hierarchical algorithm, from this process's flight recorder.
use rcomm::Communicator;

/// What places this process on a node, as the tests' launches set it: the hostname and
/// `RCOMM_HOSTID`.
pub fn node_key() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let id = std::env::var("RCOMM_HOSTID").unwrap_or_default();
    format!("{}/{id}", host.trim())
}

/// Every rank's [`node_key`], gathered on `w` (collective).
pub fn node_keys(w: &Communicator) -> Vec<String> {
    const LEN: usize = 256;
    let key = node_key();
    assert!(key.len() <= LEN, "node key {key:?} too long");
    let mut mine = [0u8; LEN];
    mine[..key.len()].copy_from_slice(key.as_bytes());
    let mut all = vec![0u8; LEN * w.size() as usize];
    w.allgather(&mine, &mut all)
        .expect("allgather of node keys");
    all.chunks(LEN)
        .map(|k| {
            String::from_utf8_lossy(k)
                .trim_end_matches('\0')
                .to_string()
        })
        .collect()
}

/// Asserts that `world`'s `same_node` follows the node keys (false across nodes, true within)
/// and that `c` spans `nodes` nodes; returns this rank's key (collective on `world`).
pub fn check_nodes(world: &rcomm::World, c: &Communicator, nodes: u32) -> String {
    let keys = node_keys(world);
    let me = keys[world.rank() as usize].clone();
    for (r, k) in keys.iter().enumerate() {
        let same = world.same_node(r as u32).expect("same_node");
        assert_eq!(
            same,
            *k == me,
            "same_node({r}) is {same} from {me:?}, but rank {r} runs on {k:?}"
        );
    }
    let mut distinct = keys.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len() as u32, nodes, "node keys {keys:?}");
    assert_eq!(c.nodes(), nodes, "nodes() with keys {keys:?}");
    me
}

/// Runs `f`, one blocking collective `op` on `c`, and asserts that it ran `hier`: recorded so
/// on `c`, then collectives on other communicators (its node and cross-node parts) before it
/// ended. `what` says which call, in the panic.
pub fn ran_hier(c: &Communicator, op: &str, what: &str, f: impl FnOnce() -> rcomm::Result<()>) {
    use rcomm_runtime::flight::recorder;
    let after = recorder().snapshot().last().map_or(0, |r| r.id);
    f().unwrap_or_else(|e| panic!("{what}: {e}"));
    let rec = c.last_collective().expect("a record");
    assert!(rec.op == op && rec.algo == "hier", "{what}: ran {rec:?}");
    let new: Vec<_> = recorder()
        .snapshot()
        .into_iter()
        .filter(|r| r.id > after && r.seq > 0)
        .collect();
    let top = new
        .iter()
        .position(|r| {
            r.op == op && r.algo == Some(rcomm_runtime::algo::Algo::Hier) && r.seq == rec.seq
        })
        .unwrap_or_else(|| panic!("{what}: not among the new records {new:?}"));
    assert!(
        new[top + 1..].iter().any(|r| r.ctx != new[top].ctx),
        "{what}: no collective on its node or cross-node parts: {new:?}"
    );
}

/// Asserts that TCP carried bytes both ways for this rank (`key`: its node, in the panic) — the
/// link between nodes — and returns the counters.
pub fn tcp_carried(w: &Communicator, key: &str) -> rcomm::NetCounters {
    let t = w.transport_counters();
    assert!(
        t.get("tcp").bytes_sent > 0 && t.get("tcp").bytes_recv > 0,
        "rank {} ({key}): TCP carried nothing: {:?}",
        w.rank(),
        t.get("tcp")
    );
    t
}
