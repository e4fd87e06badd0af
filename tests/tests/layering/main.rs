//! No import circles: in every crate of the workspace, under every parent module, the child
//! modules form layers (a DAG). An edge A -> B exists when code in A's subtree names a path into
//! B's subtree; a parent naming its children, a child naming its parent's own items, and
//! test-only modules do not count (docs/architecture.md, "Layering").

mod layers;
mod lex;
mod refs;
mod tree;

use layers::{check_crate, workspace_members};
use rcomm_tests::workspace;
use std::path::PathBuf;

#[test]
fn every_crate_s_modules_form_layers() {
    let ws = workspace();
    let members = workspace_members(&ws);
    assert!(members.len() >= 9, "workspace members: {members:?}");
    let mut failures = Vec::new();
    for dir in &members {
        let r = check_crate(dir, &ws);
        let name = dir.file_name().unwrap().to_string_lossy();
        assert!(r.modules > 0, "{name}: no module found");
        for k in &r.knots {
            failures.push(k.to_string());
        }
        for m in &r.missing {
            failures.push(format!("{m}: its file is missing\n"));
        }
        for f in &r.unreached {
            failures.push(format!("{f}: no target's module tree reaches this file\n"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} import circle(s) or unchecked file(s):\n{}",
        failures.len(),
        failures.join("")
    );
}

/// Every sibling edge of one crate with its witness, to plan a fix:
/// `LAYERING_EDGES=rcomm-core cargo test -p rcomm-tests --test layering -- --ignored --nocapture`.
#[test]
#[ignore]
fn print_edges() {
    let ws = workspace();
    let name = std::env::var("LAYERING_EDGES").unwrap_or_else(|_| "rcomm-core".into());
    for root in layers::target_roots(&ws.join(&name)) {
        let tree = tree::Tree::load(&root);
        for (parent, edges) in layers::levels(&tree, &ws) {
            for ((a, b), w) in edges {
                println!("{} [{}] {a} -> {b}  {w}", root.display(), parent.join("::"));
            }
        }
    }
}

/// A synthetic crate in a fresh temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str, files: &[(&str, &str)]) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("rcomm-layering-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The layered crate every synthetic case starts from: `low` <- `mid` <- `top`, and under `mid`
/// the children `a` <- `b`.
const LAYERED: &[(&str, &str)] = &[
    ("Cargo.toml", "[package]\nname = \"s\"\n"),
    (
        "src/lib.rs",
        "mod low;\npub mod mid;\nmod top;\n#[cfg(test)]\nmod tests;\npub use top::Top;\n",
    ),
    ("src/low.rs", "pub struct Low;\n"),
    (
        "src/mid.rs",
        "mod a;\nmod b;\npub use b::B;\npub struct Mid(crate::low::Low);\n",
    ),
    ("src/mid/a.rs", "pub struct A;\n"),
    (
        "src/mid/b.rs",
        "use super::a::A;\npub struct B(A, super::Mid);\n",
    ),
    (
        "src/top.rs",
        "use crate::{low::Low, mid::{self, B}};\npub struct Top(Low, mid::Mid, B);\n",
    ),
    // Test-only modules may name anything.
    (
        "src/tests.rs",
        "use crate::top::Top;\nfn t() { crate::mid::a::A; }\n",
    ),
];

fn with(changes: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut files: Vec<_> = LAYERED.to_vec();
    for (p, t) in changes {
        match files.iter_mut().find(|(q, _)| q == p) {
            Some(f) => f.1 = t,
            None => files.push((p, t)),
        }
    }
    files
}

fn knots(name: &str, files: &[(&str, &str)]) -> Vec<String> {
    let s = Scratch::new(name, files);
    let r = check_crate(&s.0, &s.0);
    assert!(r.unreached.is_empty(), "{:?}", r.unreached);
    assert!(r.missing.is_empty(), "{:?}", r.missing);
    r.knots.iter().map(ToString::to_string).collect()
}

#[test]
fn checker_passes_a_layered_crate() {
    assert_eq!(knots("dag", LAYERED), Vec::<String>::new());
}

#[test]
fn checker_reports_a_circle_at_the_root_with_a_witness_per_edge() {
    // low names top through a use tree, inside a function, after a comment and a string
    // that name other modules (which must not count).
    let k = knots(
        "root",
        &with(&[(
            "src/low.rs",
            "pub struct Low;\n// crate::mid::Mid\nfn f() {\n    let _ = \"crate::mid\";\n    use crate::{top::{self}};\n}\n",
        )]),
    );
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(
        k[0].contains("under the crate root, circle low -> top -> low"),
        "{}",
        k[0]
    );
    assert!(k[0].contains("low -> top  src/low.rs:5"), "{}", k[0]);
    assert!(k[0].contains("top -> low  src/top.rs:1"), "{}", k[0]);
    assert!(
        !k[0].contains("low -> mid"),
        "comments and strings must not count: {}",
        k[0]
    );
}

#[test]
fn checker_reports_a_circle_below_the_root() {
    // a names its sibling b through its parent's child-relative path: `super::b`.
    let k = knots(
        "nested",
        &with(&[("src/mid/a.rs", "pub struct A(super::b::B);\n")]),
    );
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(k[0].contains("under mid, circle a -> b -> a"), "{}", k[0]);
    assert!(k[0].contains("a -> b  src/mid/a.rs:1"), "{}", k[0]);
    assert!(k[0].contains("b -> a  src/mid/b.rs:1"), "{}", k[0]);
}

#[test]
fn checker_folds_deep_references_to_the_siblings_under_the_common_ancestor() {
    // low::deep names mid::a from two levels down; with top -> low that is no circle, but
    // mid -> low (mid.rs) and low -> mid make one at the root.
    let k = knots(
        "fold",
        &with(&[
            ("src/low.rs", "mod deep;\npub struct Low;\n"),
            ("src/low/deep.rs", "mod x {\n    use crate::mid::a;\n}\n"),
        ]),
    );
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(k[0].contains("circle low -> mid -> low"), "{}", k[0]);
    assert!(k[0].contains("low -> mid  src/low/deep.rs:2"), "{}", k[0]);
}

#[test]
fn checker_ignores_test_only_code_and_follows_imported_module_names() {
    // A #[cfg(test)] module and a test-only function in low name top: no circle.
    let files = with(&[
        (
            "src/low.rs",
            "pub struct Low;\n#[cfg(test)]\nmod tests {\n    use crate::top::Top;\n}\n#[cfg(all(test, unix))]\nfn f() -> crate::top::Top { todo!() }\n",
        ),
        ("src/mid/a.rs", "use super::*;\npub struct A;\n"),
    ]);
    assert_eq!(knots("tests", &files), Vec::<String>::new());
    // Through a glob of its parent, a sees its sibling b by the bare name `b`.
    let files = with(&[("src/mid/a.rs", "use super::*;\npub struct A(b::B);\n")]);
    let k = knots("glob", &files);
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(k[0].contains("a -> b  src/mid/a.rs:2"), "{}", k[0]);
    // Through an imported module name: `use crate::mid; .. mid::a::A` from low.
    let files = with(&[(
        "src/low.rs",
        "use crate::mid as m;\npub struct Low;\nfn f(_: m::a::A) {}\n",
    )]);
    let k = knots("alias", &files);
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(k[0].contains("low -> mid  src/low.rs:1"), "{}", k[0]);
}

#[test]
fn checker_treats_each_bin_as_its_own_root() {
    let files = with(&[
        ("src/bin/tool/main.rs", "mod p;\nmod q;\nfn main() {}\n"),
        ("src/bin/tool/p.rs", "use crate::q::Q;\npub struct P;\n"),
        ("src/bin/tool/q.rs", "pub struct Q(super::p::P);\n"),
    ]);
    let k = knots("bin", &files);
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(
        k[0].starts_with("src/bin/tool/main.rs: under the crate root, circle p -> q -> p"),
        "{}",
        k[0]
    );
}
