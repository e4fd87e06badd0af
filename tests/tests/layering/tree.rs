//! A crate target's module tree, found the way rustc finds it: from the root file, following
//! `mod name;` (to `name.rs` or `name/mod.rs`, or `#[path]`) and inline `mod name { .. }`.
//! Modules declared under a test-only `cfg` are dropped with everything inside them, and so is
//! any other test-only item: they are not part of the code whose layers we check.

use super::lex::{Kind, Tok, tokens};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub type ModPath = Vec<String>;

pub struct Module {
    pub file: PathBuf,
    /// The module's own tokens: not those of its inline children nor of dropped test items.
    pub toks: Vec<Tok>,
}

pub struct Tree {
    pub modules: BTreeMap<ModPath, Module>,
    /// Every file read (kept or dropped), to tell which files no target reaches.
    pub files: Vec<PathBuf>,
    /// Declarations whose file is missing (`file:line: mod name`).
    pub missing: Vec<String>,
}

impl Tree {
    pub fn load(root: &Path) -> Tree {
        let mut t = Tree {
            modules: BTreeMap::new(),
            files: Vec::new(),
            missing: Vec::new(),
        };
        let dir = root.parent().unwrap().to_path_buf();
        t.load_file(Vec::new(), root, dir);
        t
    }

    pub fn is_module(&self, p: &[String]) -> bool {
        self.modules.contains_key(p)
    }

    /// `file` is the module `path`; `child_dir` is where its `mod x;` files live.
    fn load_file(&mut self, path: ModPath, file: &Path, child_dir: PathBuf) {
        self.files.push(file.to_path_buf());
        let src =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let toks = tokens(&src);
        let file_dir = file.parent().unwrap().to_path_buf();
        self.scan(path, file, &src, &toks, child_dir, &file_dir, true);
    }

    #[allow(clippy::too_many_arguments)]
    fn scan(
        &mut self,
        path: ModPath,
        file: &Path,
        src: &str,
        toks: &[Tok],
        child_dir: PathBuf,
        file_dir: &Path,
        file_level: bool,
    ) {
        let mut own = Vec::new();
        let mut path_attr: Option<String> = None;
        let mut i = 0;
        while i < toks.len() {
            let t = &toks[i];
            if t.is_punct(b'#') {
                let inner = toks.get(i + 1).is_some_and(|x| x.is_punct(b'!'));
                let open = i + 1 + inner as usize;
                if toks.get(open).is_some_and(|x| x.is_punct(b'[')) {
                    let close = matching(toks, open);
                    let attr = &toks[open + 1..close];
                    if !inner && cfg_needs_test(attr) {
                        let end = skip_item(toks, close + 1);
                        // A test-only `mod x;`: its file is accounted for, not read.
                        if let Some(name) = declared_mod(&toks[close + 1..end])
                            && let Some(f) = mod_file(&child_dir, file_dir, &name, None, file_level)
                        {
                            self.files.push(f);
                        }
                        i = end;
                        continue;
                    }
                    if attr.first().is_some_and(|x| x.is_ident("path")) {
                        path_attr = attr_literal(src, toks, open, close);
                    }
                    own.extend_from_slice(&toks[i..=close]);
                    i = close + 1;
                    continue;
                }
            }
            if t.is_ident("mod")
                && let Some(name) = toks.get(i + 1).and_then(Tok::ident)
            {
                let next = toks.get(i + 2);
                let mut child = path.clone();
                child.push(name.to_string());
                if next.is_some_and(|x| x.is_punct(b';')) {
                    let f = mod_file(&child_dir, file_dir, name, path_attr.take(), file_level);
                    match f {
                        Some(f) => {
                            let cdir = if is_mod_rs(&f) {
                                f.parent().unwrap().to_path_buf()
                            } else {
                                f.with_extension("")
                            };
                            self.load_file(child, &f, cdir);
                        }
                        None => {
                            self.missing
                                .push(format!("{}:{}: mod {name}", file.display(), t.line))
                        }
                    }
                    i += 3;
                    continue;
                }
                if next.is_some_and(|x| x.is_punct(b'{')) {
                    let close = matching(toks, i + 2);
                    let cdir = child_dir.join(name);
                    self.scan(child, file, src, &toks[i + 3..close], cdir, file_dir, false);
                    path_attr = None;
                    i = close + 1;
                    continue;
                }
            }
            if t.is_punct(b';') || t.is_punct(b'}') {
                path_attr = None;
            }
            own.push(t.clone());
            i += 1;
        }
        self.modules.insert(
            path,
            Module {
                file: file.to_path_buf(),
                toks: own,
            },
        );
    }
}

fn is_mod_rs(f: &Path) -> bool {
    f.file_name().is_some_and(|n| n == "mod.rs")
}

/// The file of `mod name;`. `file_level`: declared outside any inline module (where `#[path]`
/// is relative to the declaring file's directory).
fn mod_file(
    child_dir: &Path,
    file_dir: &Path,
    name: &str,
    path_attr: Option<String>,
    file_level: bool,
) -> Option<PathBuf> {
    if let Some(p) = path_attr {
        let base = if file_level { file_dir } else { child_dir };
        let f = base.join(p);
        return f.exists().then_some(f);
    }
    let a = child_dir.join(format!("{name}.rs"));
    let b = child_dir.join(name).join("mod.rs");
    [a, b].into_iter().find(|f| f.exists())
}

/// `mod name;` (after attributes and visibility) at the start of `toks`.
fn declared_mod(toks: &[Tok]) -> Option<String> {
    let i = toks.iter().position(|t| t.is_ident("mod"))?;
    let name = toks.get(i + 1)?.ident()?.to_string();
    toks.get(i + 2)
        .is_some_and(|t| t.is_punct(b';'))
        .then_some(name)
}

/// The string of `#[path = "..."]`, read back from the source (the lexer blanked it).
fn attr_literal(src: &str, toks: &[Tok], open: usize, close: usize) -> Option<String> {
    let text = &src[toks[open].pos..toks[close].pos];
    let a = text.find('"')?;
    let b = text[a + 1..].find('"')?;
    Some(text[a + 1..a + 1 + b].to_string())
}

/// Index of the bracket closing the one at `open`.
pub fn matching(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.kind {
            Kind::Punct(b'(' | b'[' | b'{') => depth += 1,
            Kind::Punct(b')' | b']' | b'}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    toks.len().saturating_sub(1).max(open)
}

const ITEM_WORDS: &[&str] = &[
    "pub",
    "fn",
    "impl",
    "struct",
    "enum",
    "union",
    "trait",
    "mod",
    "use",
    "const",
    "static",
    "type",
    "extern",
    "unsafe",
    "async",
    "macro_rules",
];

/// End (exclusive) of the item starting at `i`: its further attributes, then through its `;`
/// or its body's closing brace. Not an item (a field, an arm, a statement): through the next
/// `,` or `;` at its depth.
pub fn skip_item(toks: &[Tok], mut i: usize) -> usize {
    while toks.get(i).is_some_and(|t| t.is_punct(b'#'))
        && toks.get(i + 1).is_some_and(|t| t.is_punct(b'['))
    {
        i = matching(toks, i + 1) + 1;
    }
    let item = toks
        .get(i)
        .and_then(Tok::ident)
        .is_some_and(|w| ITEM_WORDS.contains(&w));
    let mut w = i;
    if toks.get(w).is_some_and(|t| t.is_ident("pub")) {
        w += 1;
        if toks.get(w).is_some_and(|t| t.is_punct(b'(')) {
            w = matching(toks, w) + 1;
        }
    }
    let is_use = toks.get(w).is_some_and(|t| t.is_ident("use"));
    let mut depth = 0i32;
    let mut k = i;
    while k < toks.len() {
        match toks[k].kind {
            Kind::Punct(b'(' | b'[') => depth += 1,
            Kind::Punct(b'{') => {
                if depth == 0 && !is_use {
                    return matching(toks, k) + 1;
                }
                depth += 1;
            }
            Kind::Punct(b')' | b']' | b'}') => {
                if depth == 0 {
                    return k;
                }
                depth -= 1;
            }
            Kind::Punct(b';') if depth == 0 => return k + 1,
            Kind::Punct(b',') if depth == 0 && !item => return k + 1,
            _ => {}
        }
        k += 1;
    }
    k
}

/// `cfg(..)` whose predicate cannot hold without `test` (or `doctest`).
pub fn cfg_needs_test(attr: &[Tok]) -> bool {
    if !(attr.first().is_some_and(|t| t.is_ident("cfg"))
        && attr.get(1).is_some_and(|t| t.is_punct(b'(')))
    {
        return false;
    }
    let close = matching(attr, 1);
    needs_test(&attr[2..close])
}

fn needs_test(pred: &[Tok]) -> bool {
    let Some(head) = pred.first().and_then(Tok::ident) else {
        return false;
    };
    match head {
        "test" | "doctest" => pred.len() == 1,
        "all" | "any" if pred.get(1).is_some_and(|t| t.is_punct(b'(')) => {
            let close = matching(pred, 1);
            let parts = split_commas(&pred[2..close]);
            if head == "all" {
                parts.iter().any(|p| needs_test(p))
            } else {
                !parts.is_empty() && parts.iter().all(|p| needs_test(p))
            }
        }
        _ => false,
    }
}

fn split_commas(toks: &[Tok]) -> Vec<&[Tok]> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (k, t) in toks.iter().enumerate() {
        match t.kind {
            Kind::Punct(b'(' | b'[' | b'{') => depth += 1,
            Kind::Punct(b')' | b']' | b'}') => depth -= 1,
            Kind::Punct(b',') if depth == 0 => {
                out.push(&toks[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    if start < toks.len() {
        out.push(&toks[start..]);
    }
    out
}
