//! rcomm-cc: the C compiler (`$CC`, default `cc`) with rcomm's MPI ABI header and library.
//!
//! `rcomm-cc prog.c -o prog` compiles against rcomm's own `mpi.h` (written from rcomm-abi's
//! Rust definitions) and links `libmpi_abi.so.1` with an rpath to it; run the result with
//! `rcomm-run -n 4 ./prog`. `-c`, `-E`, `-S` and `-M` compile without linking;
//! `--showme` prints the command instead of running it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fail(msg: &str) -> ! {
    eprintln!("rcomm-cc: {msg}");
    std::process::exit(2)
}

/// rcomm's `libmpi_abi.so`: `RCOMM_ABI_LIB`, else beside this program (cargo's layout) or in
/// `../lib` (an installed prefix).
fn library(exe_dir: &Path) -> Option<PathBuf> {
    if let Some(p) = rcomm_runtime::config::abi_lib() {
        return Some(p);
    }
    [
        exe_dir.join("libmpi_abi.so"),
        exe_dir.join("../lib/libmpi_abi.so.1"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Writes `text` to `path` unless it holds it already (renamed into place: compilers running
/// at once never read half a file).
fn write_if_changed(path: &Path, text: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Points `link` at `target`, replacing what was there.
fn link(target: &Path, link: &Path) -> std::io::Result<()> {
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link)
}

/// The folder with `include/mpi.h` and `lib/libmpi_abi.so{,.1}`.
fn prepare(exe_dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    let root = exe_dir.join("rcomm-abi");
    let inc = root.join("include");
    let lib = root.join("lib");
    std::fs::create_dir_all(&inc)?;
    std::fs::create_dir_all(&lib)?;
    write_if_changed(&inc.join("mpi.h"), mpi_abi::header::header().as_bytes())?;
    let so = library(exe_dir).unwrap_or_else(|| {
        fail("libmpi_abi.so is not beside rcomm-cc (build rcomm-abi, or set RCOMM_ABI_LIB)")
    });
    let so = std::fs::canonicalize(&so)?;
    link(&so, &lib.join("libmpi_abi.so.1"))?;
    link(&so, &lib.join("libmpi_abi.so"))?;
    Ok((inc, lib))
}

fn main() {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("own path: {e}")));
    let exe_dir = exe.parent().unwrap_or(Path::new("."));
    let (inc, lib) =
        prepare(exe_dir).unwrap_or_else(|e| fail(&format!("{}: {e}", exe_dir.display())));
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let show = args.iter().any(|a| a == "--showme");
    args.retain(|a| a != "--showme");
    let link_too = !args
        .iter()
        .any(|a| ["-c", "-E", "-S", "-M", "-MM"].contains(&a.to_str().unwrap_or("")));
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.arg(format!("-I{}", inc.display())).args(&args);
    if link_too {
        cmd.arg(format!("-L{}", lib.display()))
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lmpi_abi");
    }
    if show {
        let line: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        println!("{}", line.join(" "));
        return;
    }
    match cmd.status() {
        Ok(s) => std::process::exit(s.code().unwrap_or(1)),
        Err(e) => fail(&format!("{}: {e}", cc.to_string_lossy())),
    }
}
