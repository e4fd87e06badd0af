//! The paths a module's code writes (`crate::a::b`, `super::x`, `self::y`, `child::z`, every
//! leaf of a `use` tree), each resolved to the deepest module it names.

use super::lex::{Kind, Tok};
use super::tree::{ModPath, Tree};
use std::collections::{BTreeMap, BTreeSet};

pub struct RawPath {
    pub segs: Vec<String>,
    pub line: u32,
    /// A leaf of a `use` statement: its name (alias or last segment), or None for a glob.
    pub import: Option<Option<String>>,
}

/// Every path in `toks` with at least two segments, and every `use` leaf.
pub fn paths(toks: &[Tok]) -> Vec<RawPath> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        let after_sep = i > 0 && toks[i - 1].kind == Kind::PathSep;
        if t.is_ident("use") && !after_sep {
            let line = t.line;
            let mut leaves = Vec::new();
            let end = if toks.get(i + 1).is_some_and(|x| x.kind == Kind::PathSep) {
                // `use ::name`: another crate.
                i + 2
            } else {
                use_tree(toks, i + 1, &[], &mut leaves)
            };
            for (segs, name) in leaves {
                out.push(RawPath {
                    segs,
                    line,
                    import: Some(name),
                });
            }
            i = end.max(i + 1);
            continue;
        }
        if t.ident().is_some()
            && !after_sep
            && toks.get(i + 1).is_some_and(|x| x.kind == Kind::PathSep)
        {
            let line = t.line;
            let mut segs = vec![t.ident().unwrap().to_string()];
            let mut j = i + 1;
            while toks.get(j).is_some_and(|x| x.kind == Kind::PathSep) {
                match toks.get(j + 1) {
                    Some(x) if x.ident().is_some() => {
                        segs.push(x.ident().unwrap().to_string());
                        j += 2;
                    }
                    Some(x) if x.is_punct(b'{') => {
                        // A use tree outside a `use` (inside a macro): take its leaves.
                        let mut leaves = Vec::new();
                        j = use_tree(toks, j + 1, &segs, &mut leaves);
                        for (s, _) in leaves {
                            out.push(RawPath {
                                segs: s,
                                line,
                                import: None,
                            });
                        }
                        segs.clear();
                        break;
                    }
                    _ => break,
                }
            }
            if !segs.is_empty() {
                out.push(RawPath {
                    segs,
                    line,
                    import: None,
                });
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// Parses a use tree at `i` under `prefix`; pushes (path, imported name or None for a glob).
/// Returns the index after the tree.
fn use_tree(
    toks: &[Tok],
    mut i: usize,
    prefix: &[String],
    leaves: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut segs = prefix.to_vec();
    loop {
        match toks.get(i) {
            Some(t) if t.is_punct(b'{') => {
                i += 1;
                loop {
                    match toks.get(i) {
                        None => return i,
                        Some(t) if t.is_punct(b'}') => return i + 1,
                        Some(t) if t.is_punct(b',') => i += 1,
                        _ => {
                            let before = i;
                            i = use_tree(toks, i, &segs, leaves);
                            if i == before {
                                i += 1;
                            }
                        }
                    }
                }
            }
            Some(t) if t.is_punct(b'*') => {
                leaves.push((segs, None));
                return i + 1;
            }
            Some(t) if t.ident().is_some() => {
                let w = t.ident().unwrap();
                // `self` in a group is the group's prefix.
                if !(w == "self" && !segs.is_empty() && segs.len() == prefix.len()) {
                    segs.push(w.to_string());
                }
                i += 1;
                if toks.get(i).is_some_and(|x| x.kind == Kind::PathSep) {
                    i += 1;
                    continue;
                }
                let mut name = segs.last().cloned().unwrap_or_default();
                if toks.get(i).is_some_and(|x| x.is_ident("as")) {
                    name = toks
                        .get(i + 1)
                        .and_then(Tok::ident)
                        .unwrap_or("_")
                        .to_string();
                    i += 2;
                }
                leaves.push((segs, Some(name)));
                return i;
            }
            _ => return i,
        }
    }
}

/// What a module's names lead to: the modules its `use` items name (by the name they bind),
/// the modules it glob-imports, and the names it imports from elsewhere (which hide a glob's).
#[derive(Default)]
struct Scope {
    aliases: BTreeMap<String, ModPath>,
    globs: Vec<ModPath>,
    foreign: BTreeSet<String>,
}

/// (base module, remaining segments) of `segs` written in module `m`.
fn head<'a>(
    tree: &Tree,
    scope: &Scope,
    m: &[String],
    segs: &'a [String],
) -> Option<(ModPath, &'a [String])> {
    let mut rest = &segs[1..];
    let mut base: ModPath = match segs[0].as_str() {
        "crate" => Vec::new(),
        "self" => m.to_vec(),
        "super" => m[..m.len().checked_sub(1)?].to_vec(),
        "Self" => return None,
        name => {
            let mut child = m.to_vec();
            child.push(name.to_string());
            if tree.is_module(&child) {
                child
            } else if let Some(p) = scope.aliases.get(name) {
                p.clone()
            } else if scope.foreign.contains(name) {
                return None;
            } else {
                scope.globs.iter().find_map(|g| {
                    let mut c = g.clone();
                    c.push(name.to_string());
                    tree.is_module(&c).then_some(c)
                })?
            }
        }
    };
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    Some((base, rest))
}

/// The deepest module `segs` names, and whether every segment was a module.
fn resolve(tree: &Tree, scope: &Scope, m: &[String], segs: &[String]) -> Option<(ModPath, bool)> {
    let (mut base, rest) = head(tree, scope, m, segs)?;
    for s in rest {
        base.push(s.clone());
        if !tree.is_module(&base) {
            base.pop();
            return Some((base, false));
        }
    }
    Some((base, true))
}

pub struct Reference {
    pub from: ModPath,
    pub to: ModPath,
    pub line: u32,
}

/// Every reference of every module of `tree` to a module of the same tree.
pub fn references(tree: &Tree) -> Vec<Reference> {
    let mut out = Vec::new();
    for (m, module) in &tree.modules {
        let raw = paths(&module.toks);
        // Imports may go through one another (`use crate::a; use a::b;`): settle in rounds.
        let mut scope = Scope::default();
        for _ in 0..3 {
            let mut next = Scope::default();
            for p in raw.iter().filter(|p| p.import.is_some()) {
                let r = resolve(tree, &scope, m, &p.segs);
                match (&p.import, r) {
                    (Some(None), Some((g, true))) => next.globs.push(g),
                    (Some(Some(name)), Some((t, true))) => {
                        next.aliases.insert(name.clone(), t);
                    }
                    (Some(Some(name)), _) => {
                        next.foreign.insert(name.clone());
                    }
                    _ => {}
                }
            }
            scope = next;
        }
        for p in &raw {
            if let Some((to, _)) = resolve(tree, &scope, m, &p.segs) {
                out.push(Reference {
                    from: m.clone(),
                    to,
                    line: p.line,
                });
            }
        }
    }
    out
}
