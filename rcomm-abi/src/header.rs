//! rcomm's own `mpi.h`, written from the Rust definitions: the constant tables of `consts` and
//! the prototypes `build.rs` derives from the exported functions' Rust signatures (so the
//! header declares exactly what the library builds; a program calling a function not built
//! fails to compile instead of failing at run time).

use crate::consts::*;
use std::fmt::Write as _;

const HANDLE_TYPES: &[&str] = &[
    "Op",
    "Comm",
    "Group",
    "Win",
    "File",
    "Session",
    "Message",
    "Info",
    "Errhandler",
    "Request",
    "Datatype",
];

const PROTOTYPES: &str = include_str!(concat!(env!("OUT_DIR"), "/prototypes.h"));

/// The header text.
pub fn header() -> String {
    let mut h = String::new();
    let w = &mut h;
    let _ = writeln!(
        w,
        "/* mpi.h of rcomm {} (libmpi_abi.so.1): the MPI-5.0 standard ABI. Written by rcomm-abi \
         from its Rust definitions; do not edit. */",
        env!("CARGO_PKG_VERSION")
    );
    w.push_str("#ifndef MPI_H_ABI\n#define MPI_H_ABI\n\n#include <stdint.h>\n\n");
    w.push_str("#if defined(__cplusplus)\nextern \"C\" {\n#endif\n\n");
    for (name, v) in VERSIONS {
        let _ = writeln!(w, "#define {name} {v}");
    }
    w.push_str("\ntypedef intptr_t MPI_Aint;\ntypedef int64_t MPI_Offset;\ntypedef MPI_Offset MPI_Count;\n\n");
    w.push_str("typedef struct {\n    int MPI_SOURCE;\n    int MPI_TAG;\n    int MPI_ERROR;\n    int MPI_internal[5];\n} MPI_Status;\n\n");
    for t in HANDLE_TYPES {
        let _ = writeln!(w, "typedef struct MPI_ABI_{t}* MPI_{t};");
    }
    w.push('\n');
    for table in HANDLE_TABLES {
        for (ty, name, v) in *table {
            let _ = writeln!(w, "#define {name} (({ty}){v:#010x})");
        }
    }
    for (name, v, _, _) in DATATYPES {
        let _ = writeln!(w, "#define {name} ((MPI_Datatype){v:#010x})");
    }
    for (alias, of) in DATATYPE_ALIASES {
        let _ = writeln!(w, "#define {alias} {of}");
    }
    w.push('\n');
    for table in INT_TABLES.iter().skip(1) {
        for (name, v) in *table {
            let _ = writeln!(w, "#define {name} ({v})");
        }
    }
    w.push_str("#define MPI_DISPLACEMENT_CURRENT ((MPI_Offset)-1)\n\n");
    for t in C_TYPEDEFS {
        let _ = writeln!(w, "{t}");
    }
    w.push('\n');
    for (ty, name, v) in POINTERS {
        let _ = writeln!(w, "#define {name} (({ty}){v})");
    }
    w.push('\n');
    w.push_str(PROTOTYPES);
    w.push_str("\n#if defined(__cplusplus)\n}\n#endif\n\n#endif /* MPI_H_ABI */\n");
    h
}
