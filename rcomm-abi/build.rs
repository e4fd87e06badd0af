//! Finds the `PMPI_*` functions the modules define and writes, into OUT_DIR:
//! - `stubs.rs`: an `MPI_ERR_UNSUPPORTED_OPERATION` stub for every other ABI function, and
//!   `NOT_BUILT`, their names;
//! - `aliases.rs`: `MPI_x` as a weak alias of `PMPI_x` for every function (so a tool that
//!   defines `MPI_x` and calls `PMPI_x` intercepts);
//! - `abi.map`: a version script exporting the aliases (rustc's own exports only
//!   `#[no_mangle]` items; the linker merges the two scripts);
//! - `prototypes.h`: the C prototypes of the built functions, from their Rust signatures, for
//!   rcomm's `mpi.h`.
//!
//! and sets the library's SONAME to `libmpi_abi.so.1`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[allow(dead_code)]
mod names {
    include!("src/names.rs");
}

/// Functions the standard declares with `...`.
const VARIADIC: &[&str] = &["MPI_Pcontrol"];

/// Functions whose return type is not `int`: a stub cannot stand in for them.
fn returns_int(name: &str) -> bool {
    !(name.ends_with("_fromint")
        || ["MPI_Aint_add", "MPI_Aint_diff", "MPI_Wtime", "MPI_Wtick"].contains(&name))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "bin") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// A Rust parameter or return type, in C.
fn c_type(t: &str) -> String {
    let t = t.trim();
    if let Some(rest) = t.strip_prefix("*mut ") {
        return format!("{} *", c_type(rest));
    }
    if let Some(rest) = t.strip_prefix("*const ") {
        let inner = c_type(rest);
        return if inner.ends_with('*') {
            format!("{inner} const *")
        } else {
            format!("const {inner} *")
        };
    }
    if let Some(at) = t.find("FnPtr<")
        && let Some(inner) = t[at + "FnPtr<".len()..].strip_suffix('>')
    {
        let name = inner.rsplit("::").next().unwrap_or(inner);
        return format!("{name} *");
    }
    match t.rsplit("::").next().unwrap_or(t) {
        "c_int" | "i32" => "int".into(),
        "c_char" => "char".into(),
        "c_void" => "void".into(),
        "f64" => "double".into(),
        "()" => "void".into(),
        other => other.to_owned(),
    }
}

/// The text between the parenthesis at `open` and its match.
fn balanced(s: &str, open: usize) -> Option<(&str, usize)> {
    let mut depth = 0;
    for (i, ch) in s[open..].char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some((&s[open + 1..open + i], open + i + 1));
                }
            }
            _ => {}
        }
    }
    None
}

fn split_params(p: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, ch) in p.char_indices() {
        match ch {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&p[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&p[start..]);
    out.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

/// The `extern "C" fn PMPI_*` definitions in `src`: name (MPI_ spelling) → C prototype tail
/// (return type, parameters).
fn defined(src: &str, out: &mut BTreeMap<String, (String, String)>) {
    const KEY: &str = "extern \"C\" fn PMPI_";
    let mut at = 0;
    while let Some(i) = src[at..].find(KEY) {
        let start = at + i + KEY.len();
        let Some(open) = src[start..].find('(').map(|o| start + o) else {
            break;
        };
        let name = format!("MPI_{}", &src[start..open]);
        let Some((params, after)) = balanced(src, open) else {
            break;
        };
        let body = src[after..].find('{').map_or(after, |b| after + b);
        let ret = src[after..body]
            .trim()
            .strip_prefix("->")
            .map_or("void".into(), c_type);
        let params: Vec<String> = split_params(params)
            .into_iter()
            .map(|p| {
                let (n, t) = p.split_once(':').expect("param name: type");
                // A pointer to arrays (`int ranges[][3]`) puts the name inside.
                if let Some(inner) = t
                    .trim()
                    .strip_prefix("*mut [")
                    .or_else(|| t.trim().strip_prefix("*const ["))
                    && let Some((elem, len)) = inner.trim_end_matches(']').split_once(';')
                {
                    return format!("{}{}[][{}]", spaced(&c_type(elem)), n.trim(), len.trim());
                }
                format!("{}{}", spaced(&c_type(t)), n.trim())
            })
            .collect();
        let mut params = if params.is_empty() {
            "void".into()
        } else {
            params.join(", ")
        };
        // C-variadic in the standard; Rust defines the named parameters, which the calling
        // conventions of x86-64 and AArch64 Linux pass as for a plain function.
        if VARIADIC.contains(&name.as_str()) {
            params.push_str(", ...");
        }
        out.insert(name, (ret, params));
        at = body;
    }
}

fn spaced(t: &str) -> String {
    if t.ends_with('*') {
        t.to_owned()
    } else {
        format!("{t} ")
    }
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    let mut built = BTreeMap::new();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        defined(
            &std::fs::read_to_string(f).expect("read source"),
            &mut built,
        );
    }
    println!("cargo:rerun-if-changed=src");

    for name in built.keys() {
        assert!(
            names::ABI_FUNCTIONS.contains(&name.as_str()),
            "{name} is defined but not in the ABI's function list (src/names.rs)"
        );
    }

    let mut stubs = String::from("// Written by build.rs.\n");
    let mut not_built = Vec::new();
    for &name in names::ABI_FUNCTIONS {
        if built.contains_key(name) {
            continue;
        }
        assert!(
            returns_int(name),
            "{name} does not return int: it must be built, not stubbed"
        );
        not_built.push(name);
        let p = name.replacen("MPI", "PMPI", 1);
        if names::COMM_FIRST.contains(&name) {
            writeln!(
                stubs,
                "#[doc(hidden)] #[unsafe(no_mangle)] pub extern \"C\" fn {p}(comm: MPI_Comm) -> c_int {{ unsupported(\"{name}\", Some(comm)) }}"
            )
            .unwrap();
        } else {
            writeln!(
                stubs,
                "#[doc(hidden)] #[unsafe(no_mangle)] pub extern \"C\" fn {p}() -> c_int {{ unsupported(\"{name}\", None) }}"
            )
            .unwrap();
        }
    }
    writeln!(
        stubs,
        "/// The ABI functions not built yet (each a stub above)."
    )
    .unwrap();
    writeln!(stubs, "pub const NOT_BUILT: &[&str] = &{not_built:?};").unwrap();
    std::fs::write(out.join("stubs.rs"), stubs).expect("write stubs.rs");

    let ty = if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        "@function"
    } else {
        "%function"
    };
    let mut asm = String::from("// Written by build.rs.\ncore::arch::global_asm!(\n");
    let mut map = String::from("{\n  global:\n");
    for &name in names::ABI_FUNCTIONS {
        let p = name.replacen("MPI", "PMPI", 1);
        writeln!(
            asm,
            "    \".weak {name}\", \".type {name},{ty}\", \".set {name}, {p}\","
        )
        .unwrap();
        writeln!(map, "    {name};").unwrap();
    }
    asm.push_str(");\n");
    map.push_str("};\n");
    std::fs::write(out.join("aliases.rs"), asm).expect("write aliases.rs");
    std::fs::write(out.join("abi.map"), map).expect("write abi.map");

    let mut protos = String::new();
    for (name, (ret, params)) in &built {
        writeln!(protos, "{}{name}({params});", spaced(ret)).unwrap();
    }
    for (name, (ret, params)) in &built {
        let p = name.replacen("MPI", "PMPI", 1);
        writeln!(protos, "{}{p}({params});", spaced(ret)).unwrap();
    }
    std::fs::write(out.join("prototypes.h"), protos).expect("write prototypes.h");

    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        out.join("abi.map").display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
}
