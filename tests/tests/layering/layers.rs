//! The layering rule: under every parent module (a crate root included) the child modules form
//! a DAG. A reference from module `m` to module `r` is an edge between the two children of
//! their lowest common ancestor that hold them; a reference into one's own subtree (parent to
//! child) or to an ancestor's own body (child to parent) is no edge.

use super::refs::references;
use super::tree::{ModPath, Tree};
use rcomm_tests::files_under;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};

/// A strongly connected set of sibling modules (two or more), with one witness per edge.
pub struct Knot {
    pub target: String,
    pub parent: ModPath,
    pub members: Vec<String>,
    /// One shortest circle through the first member.
    pub cycle: Vec<String>,
    /// Every edge inside the knot: (from, to, `file:line`).
    pub edges: Vec<(String, String, String)>,
}

impl fmt::Display for Knot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parent = if self.parent.is_empty() {
            "the crate root".to_string()
        } else {
            self.parent.join("::")
        };
        writeln!(
            f,
            "{}: under {parent}, circle {}",
            self.target,
            self.cycle.join(" -> ")
        )?;
        let on_cycle: BTreeSet<(&str, &str)> = self
            .cycle
            .windows(2)
            .map(|w| (w[0].as_str(), w[1].as_str()))
            .collect();
        for (a, b, w) in &self.edges {
            if on_cycle.contains(&(a.as_str(), b.as_str())) {
                writeln!(f, "    {a} -> {b}  {w}")?;
            }
        }
        if self.members.len() > 2 || self.edges.len() > self.cycle.len() - 1 {
            writeln!(f, "  the knot [{}] also holds:", self.members.join(", "))?;
            for (a, b, w) in &self.edges {
                if !on_cycle.contains(&(a.as_str(), b.as_str())) {
                    writeln!(f, "    {a} -> {b}  {w}")?;
                }
            }
        }
        Ok(())
    }
}

/// The checked outcome of one crate.
pub struct Report {
    pub knots: Vec<Knot>,
    /// Files under src/ that no target reaches (neither kept nor dropped as tests).
    pub unreached: Vec<String>,
    /// `mod x;` declarations whose file is missing.
    pub missing: Vec<String>,
    pub modules: usize,
}

fn shown(p: &Path, base: &Path) -> String {
    p.strip_prefix(base).unwrap_or(p).display().to_string()
}

/// Edges among siblings, per parent: parent -> (from, to) -> first witness.
type Levels = BTreeMap<ModPath, BTreeMap<(String, String), String>>;

pub fn levels(tree: &Tree, base: &Path) -> Levels {
    let mut levels: Levels = BTreeMap::new();
    let mut refs = references(tree);
    refs.sort_by(|a, b| {
        (&tree.modules[&a.from].file, a.line).cmp(&(&tree.modules[&b.from].file, b.line))
    });
    for r in refs {
        let k = r.from.iter().zip(&r.to).take_while(|(a, b)| a == b).count();
        if k == r.from.len() || k == r.to.len() {
            continue;
        }
        let witness = format!("{}:{}", shown(&tree.modules[&r.from].file, base), r.line);
        levels
            .entry(r.from[..k].to_vec())
            .or_default()
            .entry((r.from[k].clone(), r.to[k].clone()))
            .or_insert(witness);
    }
    levels
}

/// Strongly connected components (Tarjan) with two or more nodes, each sorted.
fn knots_of(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        adj.entry(a).or_default().push(b);
        adj.entry(b).or_default();
    }
    struct St<'a> {
        adj: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut St<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for &w in &s.adj[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = St {
        adj: &adj,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in adj.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// A shortest circle from `members[0]` back to itself inside the knot.
fn circle(members: &[String], edges: &BTreeMap<(String, String), String>) -> Vec<String> {
    let inside: BTreeSet<&str> = members.iter().map(String::as_str).collect();
    let start = members[0].as_str();
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for (a, b) in edges.keys() {
            if a != v || !inside.contains(b.as_str()) {
                continue;
            }
            if b == start {
                let mut path = vec![start.to_string()];
                let mut cur = v;
                while cur != start {
                    path.push(cur.to_string());
                    cur = prev[cur];
                }
                path.push(start.to_string());
                path.reverse();
                return path;
            }
            if !prev.contains_key(b.as_str()) {
                prev.insert(b, v);
                queue.push_back(b);
            }
        }
    }
    unreachable!("a strongly connected set has a circle")
}

/// Knots of the target whose root file is `root`; `base` shortens the file names shown.
pub fn check_target(tree: &Tree, target: &str, base: &Path) -> Vec<Knot> {
    let mut out = Vec::new();
    for (parent, edges) in levels(tree, base) {
        for members in knots_of(&edges) {
            let set: BTreeSet<&String> = members.iter().collect();
            let inner = edges
                .iter()
                .filter(|((a, b), _)| set.contains(a) && set.contains(b))
                .map(|((a, b), w)| (a.clone(), b.clone(), w.clone()))
                .collect();
            out.push(Knot {
                target: target.to_string(),
                parent: parent.clone(),
                cycle: circle(&members, &edges),
                members,
                edges: inner,
            });
        }
    }
    out
}

/// The workspace's member directories, from the `members` list of its Cargo.toml.
pub fn workspace_members(ws: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(ws.join("Cargo.toml")).unwrap();
    let at = manifest.find("members").expect("workspace members");
    let list = &manifest[at..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',')
        .map(|s| s.trim().trim_matches('"'))
        .filter(|s| !s.is_empty() && !s.starts_with('#'))
        .map(|s| ws.join(s))
        .collect()
}

/// Every target root of the crate in `dir`: the conventional places (src/lib.rs, src/main.rs,
/// src/bin/*, examples/*, tests/*, benches/*) and any `path =` its manifest gives a target.
pub fn target_roots(dir: &Path) -> Vec<PathBuf> {
    let mut roots = BTreeSet::new();
    for f in ["src/lib.rs", "src/main.rs"] {
        roots.insert(dir.join(f));
    }
    for sub in ["src/bin", "examples", "tests", "benches"] {
        let Ok(rd) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                roots.insert(p.join("main.rs"));
            } else if p.extension().is_some_and(|x| x == "rs") {
                roots.insert(p);
            }
        }
    }
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    let mut in_target = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_target = matches!(
                l,
                "[lib]" | "[[bin]]" | "[[bench]]" | "[[example]]" | "[[test]]"
            );
        } else if in_target && l.starts_with("path") && l.contains('=') {
            roots.insert(dir.join(l.split('"').nth(1).unwrap_or("")));
        }
    }
    roots.into_iter().filter(|p| p.is_file()).collect()
}

pub fn check_crate(dir: &Path, base: &Path) -> Report {
    let mut report = Report {
        knots: Vec::new(),
        unreached: Vec::new(),
        missing: Vec::new(),
        modules: 0,
    };
    let mut reached = BTreeSet::new();
    let check = |root: &Path, report: &mut Report, reached: &mut BTreeSet<PathBuf>| {
        let tree = Tree::load(root);
        report.modules += tree.modules.len();
        report
            .knots
            .extend(check_target(&tree, &shown(root, base), base));
        report
            .missing
            .extend(tree.missing.iter().map(|m| shown(Path::new(m), base)));
        reached.extend(tree.files);
    };
    for root in target_roots(dir) {
        check(&root, &mut report, &mut reached);
    }
    // Outside src/, a file no target reaches is a stand-alone program (a test builds it in a
    // project of its own): it is a root. Under src/, it is a file the crate forgot.
    for sub in ["examples", "tests", "benches"] {
        for f in files_under(&dir.join(sub), "rs") {
            if !reached.contains(&f) {
                check(&f, &mut report, &mut reached);
            }
        }
    }
    report.unreached = files_under(&dir.join("src"), "rs")
        .into_iter()
        .filter(|f| !reached.contains(f))
        .map(|f| shown(&f, base))
        .collect();
    report
}
