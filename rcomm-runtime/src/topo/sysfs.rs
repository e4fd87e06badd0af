//! rcomm's own reader of Linux sysfs, under a root that tests point at fixture trees.
//!
//! What it reads: online CPUs and their package and core ids, data and unified caches, NUMA
//! nodes, and the PCI tree with the network interfaces, InfiniBand devices and NVIDIA GPUs on
//! it (`pci`). Every file is read under the root, and symbolic links are resolved by hand so
//! that none leads outside it, whatever the tree holds. A file that exists but does not parse
//! is an error naming it; the reader never panics on what it reads.

mod cpu;
mod pci;

use super::TopoError;
use super::model::{Source, Topology};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Reads the topology of the machine whose file system is at `root` (`/` for this machine).
pub fn read(root: &Path) -> Result<Topology, TopoError> {
    let r = Reader { root };
    let hostname = r
        .read("proc/sys/kernel/hostname")?
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let source = Source::Sysfs {
        root: root.display().to_string(),
    };
    let mut t = Topology::new(source, hostname);
    let nodes = cpu::read(&r, &mut t)?;
    pci::read(&r, &mut t, &nodes)?;
    t.fill_cpusets();
    t.validate().map_err(TopoError::Invalid)?;
    Ok(t)
}

/// Linux's CPU/node list form; `os` owns the parser because its cgroup reader needs it too.
pub use crate::os::parse_cpu_list as parse_list;

/// Files under the root.
struct Reader<'a> {
    root: &'a Path,
}

/// Largest sysfs file read; real ones are a page at most.
const MAX_FILE: u64 = 1 << 20;

/// Most symbolic links followed for one path, as the kernel's limit.
const MAX_LINKS: usize = 40;

impl Reader<'_> {
    fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.root.join(rel)
    }

    /// The file's text, `None` when it does not exist.
    fn read(&self, rel: impl AsRef<Path>) -> Result<Option<String>, TopoError> {
        let path = self.path(self.resolve(rel)?);
        let mut s = String::new();
        let res = std::fs::File::open(&path).and_then(|f| f.take(MAX_FILE).read_to_string(&mut s));
        match res {
            Ok(_) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(TopoError::Parse {
                path,
                why: "not text".into(),
            }),
            Err(source) => Err(TopoError::Io { path, source }),
        }
    }

    /// The file's text; a missing file is an error.
    fn need(&self, rel: impl AsRef<Path>) -> Result<String, TopoError> {
        let rel = rel.as_ref();
        self.read(rel)?.ok_or_else(|| TopoError::Io {
            path: self.path(rel),
            source: std::io::ErrorKind::NotFound.into(),
        })
    }

    /// A parse error for the file.
    fn bad(&self, rel: impl AsRef<Path>, what: &str, text: &str) -> TopoError {
        let mut shown: String = text.trim().chars().take(40).collect();
        if text.trim().chars().count() > 40 {
            shown.push('…');
        }
        TopoError::Parse {
            path: self.path(rel),
            why: format!("expected {what}, found {shown:?}"),
        }
    }

    /// A decimal integer file (`core_id`, `numa_node`, `speed`).
    fn int(&self, rel: impl AsRef<Path>) -> Result<Option<i64>, TopoError> {
        let rel = rel.as_ref();
        match self.read(rel)? {
            None => Ok(None),
            Some(s) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.bad(rel, "an integer", &s)),
        }
    }

    /// A hexadecimal file with `0x` (`vendor`, `class`).
    fn hex(&self, rel: impl AsRef<Path>) -> Result<u32, TopoError> {
        let rel = rel.as_ref();
        let s = self.need(rel)?;
        let t = s.trim();
        t.strip_prefix("0x")
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.bad(rel, "a 0x-prefixed hexadecimal number", &s))
    }

    /// A list file (`online`, `cpulist`); `None` when missing.
    fn list(&self, rel: impl AsRef<Path>) -> Result<Option<Vec<u32>>, TopoError> {
        let rel = rel.as_ref();
        match self.read(rel)? {
            None => Ok(None),
            Some(s) => parse_list(s.trim())
                .map(Some)
                .ok_or_else(|| self.bad(rel, "a CPU list like 0-3,8", &s)),
        }
    }

    /// Names in a directory, sorted; empty when it does not exist.
    fn names(&self, rel: impl AsRef<Path>) -> Result<Vec<String>, TopoError> {
        let path = self.path(self.resolve(rel)?);
        let dir = match std::fs::read_dir(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(TopoError::Io { path, source }),
        };
        let mut v = Vec::new();
        for e in dir {
            let e = e.map_err(|source| TopoError::Io {
                path: path.clone(),
                source,
            })?;
            if let Some(n) = e.file_name().to_str() {
                v.push(n.to_string());
            }
        }
        v.sort();
        Ok(v)
    }

    /// `rel` with every symbolic link resolved, relative to the root, as if the root were `/`:
    /// an absolute target starts again at the root, and a `..` above the root is refused.
    fn resolve(&self, rel: impl AsRef<Path>) -> Result<PathBuf, TopoError> {
        let rel = rel.as_ref();
        let escape = || TopoError::Escape {
            path: self.path(rel),
            root: self.root.to_path_buf(),
        };
        let mut done = PathBuf::new();
        let mut todo: Vec<std::ffi::OsString> = Vec::new();
        push_front(&mut todo, rel);
        let mut links = 0;
        while let Some(c) = todo.pop() {
            if c == ".." {
                if !done.pop() {
                    return Err(escape());
                }
                continue;
            }
            if c == "/" {
                done = PathBuf::new();
                continue;
            }
            done.push(&c);
            let full = self.path(&done);
            let Ok(meta) = std::fs::symlink_metadata(&full) else {
                continue;
            };
            if !meta.file_type().is_symlink() {
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(TopoError::Parse {
                    path: self.path(rel),
                    why: "too many levels of symbolic links".into(),
                });
            }
            let target =
                std::fs::read_link(&full).map_err(|source| TopoError::Io { path: full, source })?;
            done.pop();
            push_front(&mut todo, &target);
        }
        Ok(done)
    }
}

/// Puts `p`'s components on the stack `todo` (popped from the end) so that they come next;
/// a root component becomes `/`.
fn push_front(todo: &mut Vec<std::ffi::OsString>, p: &Path) {
    for c in p.components().rev() {
        match c {
            Component::RootDir | Component::Prefix(_) => todo.push("/".into()),
            Component::ParentDir => todo.push("..".into()),
            Component::CurDir => {}
            Component::Normal(n) => todo.push(n.to_os_string()),
        }
    }
}
