//! No long source file without a stated reason. Every `.rs` file of every workspace member that
//! is not test-only has at most `LIMIT` lines once its test-only items (`#[cfg(test)] mod tests
//! { .. }` and any other item under a test-only `cfg`) are left out — or its leading `//!` block
//! holds a line starting with `MARKER` followed by why it stays one file (what it owns, and why
//! cutting it would scatter one thing). Test-only files do not count: those named `tests.rs` or
//! `*tests.rs`, those under a crate's `tests/` folder, and modules declared under `#[cfg(test)]`.
//! The module trees come from the layering test's reader (`tests/tests/layering/`).

#[allow(dead_code)]
#[path = "layering/layers.rs"]
mod layers;
#[allow(dead_code)]
#[path = "layering/lex.rs"]
mod lex;
#[allow(dead_code)]
#[path = "layering/refs.rs"]
mod refs;
#[allow(dead_code)]
#[path = "layering/tree.rs"]
mod tree;

use rcomm_tests::{files_under, workspace};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Lines of non-test code above which a file states why it is one file.
const LIMIT: usize = 1200;
/// The line of a file's leading `//!` block that gives the reason.
const MARKER: &str = "//! Why one file:";

/// The files of the crate in `dir` that hold non-test modules of a non-test target: every
/// target but those under `tests/`, and stand-alone programs under `examples/` and `benches/`.
fn non_test_files(dir: &Path) -> BTreeSet<PathBuf> {
    let tests = dir.join("tests");
    let mut kept = BTreeSet::new();
    let mut reached = BTreeSet::new();
    let load = |root: &Path, kept: &mut BTreeSet<PathBuf>, reached: &mut BTreeSet<PathBuf>| {
        let t = tree::Tree::load(root);
        kept.extend(t.modules.into_values().map(|m| m.file));
        reached.extend(t.files);
    };
    for root in layers::target_roots(dir) {
        if !root.starts_with(&tests) {
            load(&root, &mut kept, &mut reached);
        }
    }
    for sub in ["examples", "benches"] {
        for f in files_under(&dir.join(sub), "rs") {
            if !reached.contains(&f) {
                load(&f, &mut kept, &mut reached);
            }
        }
    }
    kept.into_iter()
        .filter(|f| {
            let name = f.file_name().unwrap().to_string_lossy();
            !name.ends_with("tests.rs") && !f.starts_with(&tests)
        })
        .collect()
}

/// Lines of `src` outside items under a test-only `cfg` (an attribute's first line through the
/// item's last).
fn non_test_lines(src: &str) -> usize {
    let toks = lex::tokens(src);
    let mut test_lines = 0;
    let mut i = 0;
    while i < toks.len() {
        let is_attr = toks[i].is_punct(b'#') && toks.get(i + 1).is_some_and(|t| t.is_punct(b'['));
        if is_attr {
            let close = tree::matching(&toks, i + 1);
            if tree::cfg_needs_test(&toks[i + 2..close]) {
                let end = tree::skip_item(&toks, close + 1);
                let last = toks[end.max(close + 1) - 1].line;
                test_lines += (last - toks[i].line + 1) as usize;
                i = end.max(close + 1);
                continue;
            }
        }
        i += 1;
    }
    src.lines().count() - test_lines
}

/// The reason after `MARKER` in the leading `//!` block, if any.
fn reason(src: &str) -> Option<&str> {
    src.lines()
        .take_while(|l| l.starts_with("//!"))
        .find_map(|l| l.strip_prefix(MARKER))
        .map(str::trim)
        .filter(|r| !r.is_empty())
}

#[test]
fn long_files_say_why_they_are_one_file() {
    let ws = workspace();
    let members = layers::workspace_members(&ws);
    assert!(members.len() >= 9, "workspace members: {members:?}");
    let mut checked = 0;
    let mut long = Vec::new();
    for dir in &members {
        for f in non_test_files(dir) {
            checked += 1;
            let src = std::fs::read_to_string(&f).unwrap();
            let n = non_test_lines(&src);
            if n > LIMIT && reason(&src).is_none() {
                let shown = f.strip_prefix(&ws).unwrap_or(&f).display().to_string();
                long.push(format!("  {shown}: {n} lines\n"));
            }
        }
    }
    assert!(checked > 100, "only {checked} files checked");
    assert!(
        long.is_empty(),
        "{} file(s) over {LIMIT} non-test lines without a `{MARKER} <reason>` line in their \
         leading //! block; split each along a seam, or say why it is one file:\n{}",
        long.len(),
        long.concat()
    );
}

/// Every counted file with its non-test lines, longest first:
/// `cargo test -p rcomm-tests --test file_size -- --ignored --nocapture`.
#[test]
#[ignore]
fn print_sizes() {
    let ws = workspace();
    let mut all = Vec::new();
    for dir in layers::workspace_members(&ws) {
        for f in non_test_files(&dir) {
            let src = std::fs::read_to_string(&f).unwrap();
            let shown = f.strip_prefix(&ws).unwrap_or(&f).display().to_string();
            all.push((non_test_lines(&src), reason(&src).is_some(), shown));
        }
    }
    all.sort_by(|a, b| b.cmp(a));
    for (n, why, f) in all.iter().take(40) {
        println!("{n:6} {} {f}", if *why { "why" } else { "   " });
    }
}

#[test]
fn counting_leaves_out_test_only_items() {
    let src = "//! A module.\nfn a() {}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n\
               #[cfg(all(test, unix))]\nfn helper() {}\nfn b() {}\n";
    assert_eq!(non_test_lines(src), 3);
    assert_eq!(reason(src), None);
    let src = "//! A module.\n//!\n//! Why one file: one state machine.\nfn a() {}\n";
    assert_eq!(reason(src), Some("one state machine."));
    // Only the leading block counts, and the marker needs a reason after it.
    assert_eq!(reason("fn a() {}\n//! Why one file: late.\n"), None);
    assert_eq!(reason("//! Why one file:\n"), None);
}
