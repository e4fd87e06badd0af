//! C programs built against the MPI-5.0 ABI (`libmpi_abi.so.1`): rcomm-run makes the ranks
//! load rcomm's library first. A job folder holds a `libmpi_abi.so.1` link to it and goes in
//! front of the ranks' `LD_LIBRARY_PATH`; the folder is removed when the job ends.

use std::ffi::OsString;
use std::path::PathBuf;

/// The job folder; removed on drop.
pub struct AbiDir(PathBuf);

impl Drop for AbiDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// rcomm's ABI library: `RCOMM_ABI_LIB`, else `libmpi_abi.so` beside this executable (cargo's
/// layout) or in `../lib` (an installed prefix).
fn library() -> Option<PathBuf> {
    if let Some(p) = rcomm_runtime::config::abi_lib() {
        return Some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libmpi_abi.so"),
        dir.join("../lib/libmpi_abi.so.1"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The `LD_LIBRARY_PATH` the ranks get, with its folder (`None` where rcomm's ABI library is
/// not there: nothing changes). `inherited` is the value the ranks would have otherwise.
pub fn prepare(job_id: &str, inherited: Option<OsString>) -> Option<(AbiDir, OsString)> {
    let lib = std::fs::canonicalize(library()?).ok()?;
    let dir = std::env::temp_dir().join(format!("rcomm-abi-{job_id}"));
    std::fs::create_dir_all(&dir).ok()?;
    let guard = AbiDir(dir.clone());
    std::os::unix::fs::symlink(&lib, dir.join("libmpi_abi.so.1")).ok()?;
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = inherited.filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    Some((guard, path))
}
