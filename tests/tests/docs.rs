//! The book's environment table lists every variable rcomm reads. And the layering
//! holds: the protocol core names no transport.

#[test]
fn readme_lists_every_rcomm_variable() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../book/src/reference/environment.md"
    ))
    .unwrap();
    for v in rcomm_transport::config::VARIABLES {
        assert!(
            readme.contains(&format!("| `{}` |", v.name)),
            "book/src/reference/environment.md lacks a table row for {}",
            v.name
        );
    }
}

/// `rcomm-core` receives its transports built (`rcomm_transport::setup`) and names none of
/// them, so a new transport touches only `rcomm-transport`.
#[test]
fn rcomm_core_names_no_transport() {
    const TRANSPORT_TYPES: &[&str] = &[
        "ShmNet",
        "TcpAcceptor",
        "ShmConfig",
        "LocalListener",
        "process_vm_readv",
        // Transports and routes by name: the core asks `Net` by capability (`Features`,
        // `Lane`, the bulk operations), never which transport reaches a peer.
        "TcpNet",
        "SimEndpoint",
        "CudaEndpoint",
        "shmnet",
        "cuda_ep",
        "Route::Shm",
        "Route::Tcp",
        "Route::Ib",
        "Route::Sim",
        "Route::Cuda",
        "net::Endpoint",
        "table::",
        // Methods one transport alone answered, now the contract's.
        "dev_get",
        "register_dev",
        "get_dev",
        "dev_busy",
        "forget_dev_peer",
        ".releases(",
        "ib_rails",
        "ib_mut",
        "get_ok",
        "drain_bell",
    ];
    fn rs_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                rs_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../rcomm-core/src"));
    let mut files = Vec::new();
    rs_files(src, &mut files);
    assert!(
        files.len() > 10,
        "rcomm-core/src: only {} files",
        files.len()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            for t in TRANSPORT_TYPES {
                if line.contains(t) {
                    found.push(format!("{}:{}: {t}", f.display(), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "rcomm-core names transports:\n{}",
        found.join("\n")
    );
}

/// `rcomm-core` has no import cycle: its modules form layers, and no layer names a module
/// above it. From the bottom: `p2p` (checked mode reaches it through `p2p::hook`); `fr`,
/// `straggler`, `ctxid` and `coll_state` (plain state and records; `coll_state` may use the
/// schedules, `coll::schedule`, a leaf); `comm` (the communicator); then `group`, `coll`,
/// `mesh`, `world`, `shared_buf`. Only code counts, not unit tests (which may start a world).
#[test]
fn rcomm_core_has_no_import_cycle_its_layers_do_not_reach_up() {
    const ABOVE_COMM: &[&str] = &[
        "crate::coll::",
        "crate::coll;",
        "crate::group",
        "crate::mesh",
        "crate::world",
        "crate::shared_buf",
        "crate::init",
    ];
    const ABOVE_STATE: &[&str] = &["crate::comm", "crate::Communicator"];
    let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../rcomm-core/src"));
    let mut rules: Vec<(std::path::PathBuf, Vec<&str>)> = Vec::new();
    let both: Vec<&str> = ABOVE_COMM.iter().chain(ABOVE_STATE).copied().collect();
    for f in ["fr.rs", "straggler.rs", "ctxid.rs", "coll_state.rs"] {
        rules.push((src.join(f), both.clone()));
    }
    rules.push((src.join("comm.rs"), ABOVE_COMM.to_vec()));
    for dir in ["p2p", "p2p/engine"] {
        for e in std::fs::read_dir(src.join(dir)).unwrap().flatten() {
            let p = e.path();
            // The sim test bed starts engines of its own; it is a test, not a layer.
            if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("simtests.rs") {
                let mut forbidden = both.clone();
                forbidden.extend(["crate::fr", "crate::straggler", "crate::coll_state"]);
                rules.push((p, forbidden));
            }
        }
    }
    assert!(rules.len() >= 12, "{rules:?}");
    let mut found = Vec::new();
    for (f, forbidden) in &rules {
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            // The schedules are a leaf (they name nothing of the crate).
            let line = line.replace("crate::coll::schedule", "");
            for a in forbidden {
                if line.contains(a) {
                    found.push(format!("{}:{}: {a}", f.display(), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "layers of rcomm-core reach up:\n{}",
        found.join("\n")
    );
    // The schedules stay a leaf.
    for e in std::fs::read_dir(src.join("coll/schedule"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        assert!(
            !code.contains("crate::"),
            "{} names the crate: the schedules must stay a leaf",
            e.path().display()
        );
    }
}
