//! The README is the front door: it must list every variable rcomm reads.

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
