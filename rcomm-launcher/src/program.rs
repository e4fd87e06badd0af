//! Finding PROGRAM: like a shell (PATH), then beside `rcomm-run` itself, so
//! `target/release/rcomm-run -n 2 rcomm-bench …` finds `target/release/rcomm-bench`.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why PROGRAM cannot be run.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ProgramError {
    /// Not in any searched directory.
    #[error(
        "{program}: command not found in PATH{beside}; give a path (e.g. ./{program}) or add its directory to PATH",
        program = .program.to_string_lossy(),
        beside = .beside.as_ref().map(|d| format!(" nor beside rcomm-run in {}", d.display())).unwrap_or_default()
    )]
    NotFound {
        /// What was asked for.
        program: OsString,
        /// The launcher's own directory, also searched.
        beside: Option<PathBuf>,
    },
    /// Found, but not executable.
    #[error("{}: found but not executable; check its permissions (chmod +x)", .0.display())]
    NotExecutable(PathBuf),
}

impl ProgramError {
    /// The exit status a shell uses for this: 127 (not found) or 126 (not executable).
    pub fn exit_code(&self) -> i32 {
        match self {
            ProgramError::NotFound { .. } => 127,
            ProgramError::NotExecutable(_) => 126,
        }
    }
}

fn is_executable_file(p: &Path) -> Option<bool> {
    let md = std::fs::metadata(p).ok()?;
    md.is_file().then(|| md.permissions().mode() & 0o111 != 0)
}

/// The directory holding the running executable.
pub fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()?
        .parent()
        .map(Path::to_path_buf)
}

/// Resolves `program`: a name with a slash is used as given; otherwise each PATH directory is
/// tried in order (an empty entry meaning the current directory, as in POSIX), then `beside`.
pub fn find_program(
    program: &OsStr,
    path: Option<&OsStr>,
    beside: Option<&Path>,
) -> Result<PathBuf, ProgramError> {
    let p = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return match is_executable_file(p) {
            Some(true) => Ok(p.to_path_buf()),
            Some(false) => Err(ProgramError::NotExecutable(p.to_path_buf())),
            None if p.is_dir() => Err(ProgramError::NotExecutable(p.to_path_buf())),
            None => Err(ProgramError::NotFound {
                program: program.to_os_string(),
                beside: None,
            }),
        };
    }
    let mut dirs: Vec<PathBuf> = path
        .map(|p| {
            std::env::split_paths(p)
                .map(|d| {
                    if d.as_os_str().is_empty() {
                        PathBuf::from(".")
                    } else {
                        d
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    dirs.extend(beside.map(Path::to_path_buf));
    let mut not_exec = None;
    for d in dirs {
        let cand = d.join(program);
        match is_executable_file(&cand) {
            Some(true) => return Ok(cand),
            Some(false) => not_exec = not_exec.or(Some(cand)),
            None => {}
        }
    }
    Err(match not_exec {
        Some(c) => ProgramError::NotExecutable(c),
        None => ProgramError::NotFound {
            program: program.to_os_string(),
            beside: beside.map(Path::to_path_buf),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rcomm-launcher-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn make(dir: &Path, name: &str, mode: u32) {
        let p = dir.join(name);
        fs::write(&p, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn path_comes_first_then_the_launchers_directory() {
        let root = scratch("lookup");
        let (a, b, me) = (root.join("a"), root.join("b"), root.join("me"));
        for d in [&a, &b, &me] {
            fs::create_dir_all(d).unwrap();
        }
        make(&b, "prog", 0o755);
        make(&me, "prog", 0o755);
        make(&me, "only-beside", 0o755);
        make(&a, "noexec", 0o644);
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(
            find_program("prog".as_ref(), Some(&path), Some(&me)).unwrap(),
            b.join("prog")
        );
        assert_eq!(
            find_program("only-beside".as_ref(), Some(&path), Some(&me)).unwrap(),
            me.join("only-beside")
        );
        let e = find_program("missing".as_ref(), Some(&path), Some(&me)).unwrap_err();
        assert_eq!(e.exit_code(), 127);
        assert!(
            e.to_string().contains("not found") && e.to_string().contains("beside rcomm-run"),
            "{e}"
        );
        let e = find_program("noexec".as_ref(), Some(&path), Some(&me)).unwrap_err();
        assert_eq!(e.exit_code(), 126, "{e}");
        // With a slash: used as given.
        let direct = b.join("prog");
        assert_eq!(
            find_program(direct.as_os_str(), None, None).unwrap(),
            direct
        );
        assert_eq!(
            find_program(root.join("nope/x").as_os_str(), None, None)
                .unwrap_err()
                .exit_code(),
            127
        );
        assert_eq!(
            find_program("prog".as_ref(), None, None)
                .unwrap_err()
                .exit_code(),
            127
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
