//! The README is the front door: it must list every variable rcomm reads. And the layering
//! holds: the protocol core names no transport.

#[test]
fn readme_lists_every_rcomm_variable() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    for v in rcomm_transport::config::VARIABLES {
        assert!(
            readme.contains(&format!("| `{}` |", v.name)),
            "README.md lacks a table row for {}",
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

/// The layers of `rcomm-core` that must not reach up: the point-to-point engine (checked mode
/// reaches it through `p2p::hook`), the flight recorder, the straggler statistics and the
/// context ids. Only their code counts, not their unit tests (which may start a world).
#[test]
fn rcomm_core_lower_layers_import_nothing_above_them() {
    const ABOVE: &[&str] = &[
        "crate::comm",
        "crate::coll",
        "crate::group",
        "crate::mesh",
        "crate::world",
        "crate::shared_buf",
        "crate::Communicator",
    ];
    let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../rcomm-core/src"));
    let mut files: Vec<std::path::PathBuf> = ["fr.rs", "straggler.rs", "ctxid.rs"]
        .iter()
        .map(|f| src.join(f))
        .collect();
    for dir in ["p2p", "p2p/engine"] {
        for e in std::fs::read_dir(src.join(dir)).unwrap().flatten() {
            let p = e.path();
            // The sim test bed starts engines of its own; it is a test, not a layer.
            if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("simtests.rs") {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 10, "{files:?}");
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for a in ABOVE {
                if line.contains(a) {
                    found.push(format!("{}:{}: {a}", f.display(), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "lower layers of rcomm-core reach up:\n{}",
        found.join("\n")
    );
}
