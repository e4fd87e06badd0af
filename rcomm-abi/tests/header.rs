//! rcomm's ABI definitions against the standard's: a C program written from rcomm-abi's Rust
//! tables `static_assert`s every constant's value, every predefined handle, every struct's
//! size and field offsets and the size of each C type a predefined datatype describes. It is
//! compiled against rcomm's own `mpi.h` (always) and MPICH's published `mpi_abi.h` (when the
//! wheel is here); a wrong value in either header or in rcomm fails the compile. A second
//! program redeclares rcomm's prototypes after MPICH's header, so a signature that differs
//! from the standard's is a compile error too.

mod common;

use mpi_abi::consts::*;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// The checking program.
fn checks() -> String {
    let mut c = String::from(
        "#include <mpi.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <wchar.h>\n#include <complex.h>\n\n",
    );
    for table in INT_TABLES {
        for (name, v) in *table {
            let _ = writeln!(c, "_Static_assert({name} == {v}, \"{name}\");");
        }
    }
    for table in HANDLE_TABLES {
        for (ty, name, v) in *table {
            let _ = writeln!(
                c,
                "_Static_assert(sizeof({ty}) == sizeof(void*), \"{ty}\");"
            );
            let _ = writeln!(c, "static const {ty} check_{name} = {name};");
            let _ = writeln!(c, "_Static_assert((intptr_t){name} == {v}, \"{name}\");");
        }
    }
    for (name, v, _, _) in DATATYPES {
        let _ = writeln!(c, "_Static_assert((intptr_t){name} == {v}, \"{name}\");");
    }
    for (alias, of) in DATATYPE_ALIASES {
        let _ = writeln!(c, "_Static_assert({alias} == {of}, \"{alias}\");");
    }
    for (ty, name, v) in POINTERS {
        let _ = writeln!(c, "static {ty} const check_{name} = {name};");
        let _ = writeln!(c, "_Static_assert((intptr_t){name} == {v}, \"{name}\");");
    }
    for (ty, size) in SCALARS {
        let _ = writeln!(
            c,
            "_Static_assert(sizeof({ty}) == {size}, \"sizeof {ty}\");"
        );
    }
    for (ty, size, fields) in STRUCTS {
        let _ = writeln!(
            c,
            "_Static_assert(sizeof({ty}) == {size}, \"sizeof {ty}\");"
        );
        for (f, off) in *fields {
            let _ = writeln!(
                c,
                "_Static_assert(offsetof({ty}, {f}) == {off}, \"{ty}.{f}\");"
            );
        }
    }
    for (dt, cty) in DATATYPE_C_TYPES {
        let (_, _, size, extent) = DATATYPES
            .iter()
            .find(|(n, ..)| n == dt)
            .unwrap_or_else(|| panic!("{dt} not in DATATYPES"));
        let _ = writeln!(
            c,
            "_Static_assert(sizeof({cty}) == {extent}, \"sizeof {dt}\");"
        );
        let _ = size;
    }
    c.push_str("int main(void) { return 0; }\n");
    c
}

fn compile(dir: &Path, cc: &mut Command, src: &str) {
    let file = dir.join("checks.c");
    std::fs::write(&file, src).expect("write checks.c");
    common::run_ok(
        cc.arg("-std=c11")
            .arg("-c")
            .arg(&file)
            .arg("-o")
            .arg(dir.join("checks.o")),
    );
}

#[test]
fn rcomm_header_has_the_standard_values() {
    let dir = common::scratch("header-own");
    let mut cc = Command::new(common::rcomm_cc());
    cc.env("RCOMM_ABI_LIB", common::library());
    compile(&dir, &mut cc, &checks());
}

#[test]
fn mpich_header_has_rcomm_values() {
    let Some(m) = common::mpich() else { return };
    let dir = common::scratch("header-mpich");
    let mut cc = Command::new("cc");
    cc.arg("-DMPI_ABI")
        .arg(format!("-I{}", m.join("include").display()));
    compile(&dir, &mut cc, &checks());
}

/// Every prototype of rcomm's header, redeclared after MPICH's: C accepts only compatible
/// redeclarations.
#[test]
fn rcomm_prototypes_match_the_standard() {
    let Some(m) = common::mpich() else { return };
    let dir = common::scratch("prototypes");
    let header = mpi_abi::header::header();
    let protos: Vec<&str> = header
        .lines()
        .filter(|l| {
            l.contains("MPI_")
                && l.ends_with(");")
                && !l.starts_with("typedef")
                && !l.starts_with("#")
        })
        .collect();
    assert!(
        protos.len() > 200,
        "only {} prototypes in rcomm's header",
        protos.len()
    );
    let src = format!(
        "#include <mpi.h>\n{}\nint main(void) {{ return 0; }}\n",
        protos.join("\n")
    );
    let mut cc = Command::new("cc");
    cc.arg("-DMPI_ABI")
        .arg("-Werror")
        .arg(format!("-I{}", m.join("include").display()));
    compile(&dir, &mut cc, &src);
}
