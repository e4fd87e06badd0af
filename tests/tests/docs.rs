//! The book's environment table lists every variable rcomm reads. And the protocol core names
//! no transport (the import layering of every crate is `tests/tests/layering/`).

#[test]
fn readme_lists_every_rcomm_variable() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../book/src/reference/environment.md"
    ))
    .unwrap();
    for v in rcomm_runtime::config::VARIABLES {
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
    let files = rcomm_tests::files_under(&rcomm_tests::workspace().join("rcomm-core/src"), "rs");
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

/// The project's documents stand alone: none points at a file outside the repository.
#[test]
fn the_documents_name_nothing_outside_the_repository() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut files = vec![root.join("README.md")];
    files.extend(rcomm_tests::files_under(&root.join("docs"), "md"));
    files.extend(rcomm_tests::files_under(&root.join("book/src"), "md"));
    assert!(files.len() > 5, "{files:?}");
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains("../shared") || l.contains("DESIGN.md"))
                .map(|(i, l)| format!("{}:{}: {l}", f.display(), i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "documents point outside the repository:\n{}",
        found.join("\n")
    );
}
