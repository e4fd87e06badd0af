//! One algorithm registry: an algorithm's name is spelled in `rcomm_runtime::algo` and
//! nowhere else in the library crates' code, so adding, renaming or retiring one is a change in
//! one table that every parser, chooser, executor and printout follows.

use rcomm_runtime::algo::Algo;
use rcomm_tests::files_under;
use std::path::{Path, PathBuf};

/// The library crates whose code must not spell an algorithm's name.
const CRATES: &[&str] = &[
    "rcomm-core/src",
    "rcomm-runtime/src",
    "rcomm-transport/src",
    "rcomm-launcher/src",
    "rcomm-mpi/src",
];

/// The registry itself.
const REGISTRY: &str = "rcomm-runtime/src/algo.rs";

/// Literals that are spelled like an algorithm but name something else: (file, literal, a
/// piece of the line that says what it names, why).
const ALLOWED: &[(&str, &str, &str, &str)] = &[
    (
        "rcomm-runtime/src/config.rs",
        "\"shm\"",
        "TransportChoice::Shm",
        "RCOMM_TRANSPORT's value for the shared-memory transport, not the algorithm",
    ),
    (
        "rcomm-transport/src/shmnet.rs",
        "\"shm\"",
        "const NAME",
        "the shared-memory transport's name in the transport table, not the algorithm",
    ),
];

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The lines of `text` outside `#[cfg(test)]` items (rustfmt puts an item's closing brace at
/// its opening line's indentation) and outside comments, numbered from 1; and the names of
/// test-only module files it declares (`#[cfg(test)] mod x;`).
fn code_lines(text: &str) -> (Vec<(usize, &str)>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut out, mut test_mods) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            let ind = indent(line);
            i += 1;
            while i < lines.len() && lines[i].trim_start().starts_with("#[") {
                i += 1;
            }
            let Some(first) = lines.get(i) else { break };
            let first = first.trim_end();
            if first.ends_with(';') {
                if let Some(m) = first.trim_start().strip_prefix("mod ") {
                    test_mods.push(m.trim_end_matches(';').trim().to_string());
                }
                i += 1;
                continue;
            }
            i += 1;
            while i < lines.len() {
                let l = lines[i];
                i += 1;
                if indent(l) == ind && l.trim_start().starts_with('}') {
                    break;
                }
            }
            continue;
        }
        if !t.starts_with("//") {
            out.push((i + 1, line));
        }
        i += 1;
    }
    (out, test_mods)
}

/// Where `lit` (a quoted name) occurs in `line` as a string literal of its own: not inside a
/// longer literal's escapes and not a byte string.
fn has_literal(line: &str, lit: &str) -> bool {
    line.match_indices(lit).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        !matches!(before, Some('b' | '\\'))
    })
}

fn offenders(root: &Path) -> Vec<String> {
    let names: Vec<String> = Algo::ALL
        .iter()
        .map(|a| format!("\"{}\"", a.name()))
        .collect();
    let mut found = Vec::new();
    for dir in CRATES {
        let files = files_under(&root.join(dir), "rs");
        assert!(files.len() > 3, "{dir}: only {} files", files.len());
        let mut skip: Vec<PathBuf> = Vec::new();
        let mut texts = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            let (_, mods) = code_lines(&text);
            for m in mods {
                let d = f.parent().unwrap();
                skip.push(d.join(format!("{m}.rs")));
                skip.push(d.join(&m).join("mod.rs"));
                // A `mod x;` in `a/mod.rs` or `a.rs` (the latter's children live in `a/`).
                if let Some(stem) = f.file_stem().filter(|s| *s != "mod" && *s != "lib") {
                    skip.push(d.join(stem).join(format!("{m}.rs")));
                }
            }
            texts.push((f.clone(), text));
        }
        for (f, text) in &texts {
            let rel = f
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let file = f.file_name().unwrap().to_string_lossy();
            if rel == REGISTRY || file.ends_with("tests.rs") || skip.contains(f) {
                continue;
            }
            let (lines, _) = code_lines(text);
            for (n, line) in lines {
                for lit in &names {
                    let allowed = ALLOWED
                        .iter()
                        .any(|(af, al, ctx, _)| *af == rel && al == lit && line.contains(ctx));
                    if !allowed && has_literal(line, lit) {
                        found.push(format!("{rel}:{n}: {lit}: {}", line.trim()));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn no_algorithm_name_is_spelled_outside_the_registry() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let found = offenders(root);
    assert!(
        found.is_empty(),
        "algorithm names spelled outside {REGISTRY} (use rcomm_runtime::algo::Algo, or \
         allow-list a literal that names something else, with the reason):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_skips_tests_and_comments_and_sees_code() {
    let text = "fn a() { f(\"ring\"); }\n\
                // \"tree\" in a comment\n\
                /// \"bruck\" in a doc comment\n\
                fn b() { g(b\"rd\", \"say \\\"shm\\\"\"); }\n\
                #[cfg(test)]\n\
                mod tests {\n    fn t() { h(\"pairwise\"); }\n}\n\
                #[cfg(test)]\n\
                mod sim;\n\
                fn c() { k(\"linear\"); }\n";
    let (lines, mods) = code_lines(text);
    let hits: Vec<(usize, &str)> = lines
        .iter()
        .flat_map(|&(n, l)| {
            Algo::ALL
                .iter()
                .map(|a| a.name())
                .filter(move |name| has_literal(l, &format!("\"{name}\"")))
                .map(move |name| (n, name))
        })
        .collect();
    assert_eq!(hits, vec![(1, "ring"), (11, "linear")]);
    assert_eq!(mods, vec!["sim".to_string()]);
    // "direct" inside a longer literal is not the algorithm's name.
    assert!(!has_literal("x(\"direct path\")", "\"direct\""));
}
