//! Fake sysfs trees for tests: two machines written as Linux lays them out (plain files, binary
//! PCI config space, and the kernel's relative symlinks for `bus/pci/devices` and
//! `class/*/*`), detailed enough that hwloc reads them too (`HWLOC_FSROOT`), which is how
//! `tests/fixtures/topo/*.xml` were made. Not part of the API.
//!
//! CPU numbering follows Intel servers: the first thread of every core across the packages,
//! then the second threads, so a package's PUs are not contiguous (`0-3,8-11`).

use std::io;
use std::path::{Path, PathBuf};

/// The machines a fixture can describe.
pub const NAMES: &[&str] = &["server2s", "dgx"];

/// Writes the fixture `name` (one of [`NAMES`]) under `dir`.
pub fn write(name: &str, dir: &Path) -> io::Result<()> {
    match name {
        "server2s" => server2s(dir),
        "dgx" => dgx(dir),
        _ => Err(io::Error::new(io::ErrorKind::NotFound, name.to_string())),
    }
}

/// 2 packages × 4 cores × 2 threads, a NUMA node per package, `eth0` (25 Gb/s) behind package
/// 0's root port and `eth1` (link down) behind package 1's, and a USB controller that the I/O
/// filter drops.
pub fn server2s(dir: &Path) -> io::Result<()> {
    let fs = Fs(dir.to_path_buf(), Default::default());
    cpus(&fs, 2, 4, 2)?;
    fs.file("proc/sys/kernel/hostname", "server2s\n")?;
    let hb0 = fs.host_bridge(0, 0);
    let rp = fs.func(
        &hb0,
        addr(0, 0, 1, 0),
        INTEL,
        0x2030,
        0x060400,
        0,
        Port::Root(1, 1),
    )?;
    let nic = fs.func(
        &rp,
        addr(0, 1, 0, 0),
        INTEL,
        0x159b,
        0x020000,
        0,
        Port::End(4, 8),
    )?;
    fs.net(&nic, "eth0", "25000")?;
    fs.func(
        &hb0,
        addr(0, 0, 0x14, 0),
        INTEL,
        0xa1af,
        0x0c0330,
        0,
        Port::Integrated,
    )?;
    let hb1 = fs.host_bridge(0, 0x80);
    let rp = fs.func(
        &hb1,
        addr(0, 0x80, 1, 0),
        INTEL,
        0x2030,
        0x060400,
        1,
        Port::Root(0x81, 0x81),
    )?;
    let nic = fs.func(
        &rp,
        addr(0, 0x81, 0, 0),
        INTEL,
        0x159b,
        0x020000,
        1,
        Port::End(4, 8),
    )?;
    fs.net(&nic, "eth1", "-1")?;
    fs.virtual_net("lo")
}

/// 2 packages × 8 cores × 2 threads, a NUMA node per package; four PCIe switches, each on its
/// own host bridge behind a root port, each with two NVIDIA GPUs and a ConnectX HCA (`mlx5_K`
/// with IPoIB `ibK`); switches 0–1 local to NUMA node 0, 2–3 to node 1. A management `eth0` sits
/// on host bridge 0 itself, and the BMC's VGA (not NVIDIA: no GPU device) behind its own bridge.
pub fn dgx(dir: &Path) -> io::Result<()> {
    let fs = Fs(dir.to_path_buf(), Default::default());
    cpus(&fs, 2, 8, 2)?;
    fs.file("proc/sys/kernel/hostname", "dgx\n")?;
    for (s, hbus) in [0x00u8, 0x20, 0x80, 0xa0].into_iter().enumerate() {
        let node = if s < 2 { 0 } else { 1 };
        let hb = fs.host_bridge(0, hbus);
        let (b1, b2) = (hbus + 1, hbus + 2);
        let rp = fs.func(
            &hb,
            addr(0, hbus, 1, 0),
            AMD,
            0x1483,
            0x060400,
            node,
            Port::Root(b1, hbus + 5),
        )?;
        let up = fs.func(
            &rp,
            addr(0, b1, 0, 0),
            PLX,
            0xc010,
            0x060400,
            node,
            Port::Up(b2, hbus + 5),
        )?;
        for (d, (vendor, device, class)) in [
            (NVIDIA, 0x20b0, 0x030200),
            (NVIDIA, 0x20b0, 0x030200),
            (MELLANOX, 0x101b, 0x020700),
        ]
        .into_iter()
        .enumerate()
        {
            let bus = hbus + 3 + d as u8;
            let dp = fs.func(
                &up,
                addr(0, b2, d as u8, 0),
                PLX,
                0xc010,
                0x060400,
                node,
                Port::Down(bus),
            )?;
            let f = fs.func(
                &dp,
                addr(0, bus, 0, 0),
                vendor,
                device,
                class,
                node,
                Port::End(4, 16),
            )?;
            if vendor == MELLANOX {
                fs.class_dev(&f, "infiniband", &format!("mlx5_{s}"), &[])?;
                fs.net(&f, &format!("ib{s}"), "200000")?;
            }
        }
        if s == 0 {
            let mgmt = fs.func(
                &hb,
                addr(0, 0, 4, 0),
                INTEL,
                0x1533,
                0x020000,
                0,
                Port::Integrated,
            )?;
            fs.net(&mgmt, "eth0", "1000")?;
            let rp = fs.func(
                &hb,
                addr(0, 0, 7, 1),
                AMD,
                0x1484,
                0x060400,
                0,
                Port::Root(6, 7),
            )?;
            let br = fs.func(
                &rp,
                addr(0, 6, 0, 0),
                ASPEED,
                0x1150,
                0x060400,
                0,
                Port::Up(7, 7),
            )?;
            fs.func(
                &br,
                addr(0, 7, 0, 0),
                ASPEED,
                0x2000,
                0x030000,
                0,
                Port::Legacy,
            )?;
        }
    }
    fs.virtual_net("lo")
}

const INTEL: u16 = 0x8086;
const AMD: u16 = 0x1022;
const PLX: u16 = 0x1000;
const NVIDIA: u16 = 0x10de;
const MELLANOX: u16 = 0x15b3;
const ASPEED: u16 = 0x1a03;

/// The root, and the directories already made (the trees have thousands of small files, and
/// creating each one's parents again would dominate the tests' time).
struct Fs(
    PathBuf,
    std::cell::RefCell<std::collections::HashSet<PathBuf>>,
);

/// A PCI function's place on the bus, which decides its config header and PCIe port type.
#[derive(Clone, Copy)]
enum Port {
    /// A root port: secondary and subordinate bus.
    Root(u8, u8),
    /// A switch's upstream port: secondary and subordinate bus.
    Up(u8, u8),
    /// A switch's downstream port to one bus.
    Down(u8),
    /// An endpoint with its PCIe link: generation (4 = 16 GT/s) and width.
    End(u8, u8),
    /// A root-complex integrated endpoint (no link of its own).
    Integrated,
    /// A conventional PCI device (no PCIe capability, no link files).
    Legacy,
}

fn addr(domain: u16, bus: u8, dev: u8, func: u8) -> String {
    format!("{domain:04x}:{bus:02x}:{dev:02x}.{func}")
}

impl Fs {
    fn file(&self, rel: &str, content: impl AsRef<[u8]>) -> io::Result<()> {
        let p = self.0.join(rel);
        self.mkdir(&p)?;
        std::fs::write(p, content)
    }

    fn link(&self, rel: &str, target: &str) -> io::Result<()> {
        let p = self.0.join(rel);
        self.mkdir(&p)?;
        std::os::unix::fs::symlink(target, p)
    }

    fn mkdir(&self, file: &Path) -> io::Result<()> {
        let dir = file.parent().unwrap_or(&self.0);
        if !self.1.borrow().contains(dir) {
            std::fs::create_dir_all(dir)?;
            self.1.borrow_mut().insert(dir.to_path_buf());
        }
        Ok(())
    }

    /// The host bridge's directory (relative to the root), `sys/devices/pciDDDD:BB`.
    fn host_bridge(&self, domain: u16, bus: u8) -> String {
        format!("sys/devices/pci{domain:04x}:{bus:02x}")
    }

    /// Writes a PCI function under `parent` (a directory relative to the root) with its
    /// `bus/pci/devices` link, and returns its directory.
    #[allow(clippy::too_many_arguments)]
    fn func(
        &self,
        parent: &str,
        a: String,
        vendor: u16,
        device: u16,
        class: u32,
        node: i32,
        port: Port,
    ) -> io::Result<String> {
        let dir = format!("{parent}/{a}");
        self.file(&format!("{dir}/vendor"), format!("{vendor:#06x}\n"))?;
        self.file(&format!("{dir}/device"), format!("{device:#06x}\n"))?;
        self.file(&format!("{dir}/class"), format!("{class:#08x}\n"))?;
        self.file(&format!("{dir}/numa_node"), format!("{node}\n"))?;
        let cpus = self.node_cpus(node)?;
        self.file(
            &format!("{dir}/local_cpulist"),
            format!("{}\n", list(&cpus)),
        )?;
        self.file(
            &format!("{dir}/local_cpus"),
            format!("{}\n", mask(&cpus, self.ncpus()?)),
        )?;
        let link = match port {
            Port::End(g, w) => Some((g, w)),
            Port::Root(..) | Port::Up(..) | Port::Down(_) => Some((4, 16)),
            Port::Integrated | Port::Legacy => None,
        };
        if let Some((g, w)) = link {
            let speed = ["2.5", "5.0", "8.0", "16.0", "32.0"][usize::from(g - 1)];
            for pre in ["current", "max"] {
                self.file(
                    &format!("{dir}/{pre}_link_speed"),
                    format!("{speed} GT/s PCIe\n"),
                )?;
                self.file(&format!("{dir}/{pre}_link_width"), format!("{w}\n"))?;
            }
        }
        let bus = u8::from_str_radix(&a[5..7], 16).unwrap_or(0);
        self.file(
            &format!("{dir}/config"),
            config(vendor, device, class, bus, port),
        )?;
        self.link(
            &format!("sys/bus/pci/devices/{a}"),
            &format!("../../../{}", dir.trim_start_matches("sys/")),
        )?;
        Ok(dir)
    }

    /// A class device (`net/eth0`, `infiniband/mlx5_0`) of the function at `func`: its
    /// directory with the files given and a `device` link back, and the `class/` link to it.
    fn class_dev(
        &self,
        func: &str,
        class: &str,
        name: &str,
        files: &[(&str, &str)],
    ) -> io::Result<()> {
        let dir = format!("{func}/{class}/{name}");
        self.file(&format!("{dir}/uevent"), format!("INTERFACE={name}\n"))?;
        for (f, v) in files {
            self.file(&format!("{dir}/{f}"), format!("{v}\n"))?;
        }
        let a = func.rsplit('/').next().unwrap_or_default();
        self.link(&format!("{dir}/device"), &format!("../../../{a}"))?;
        self.link(
            &format!("sys/class/{class}/{name}"),
            &format!("../../{}", dir.trim_start_matches("sys/")),
        )
    }

    fn net(&self, func: &str, name: &str, speed: &str) -> io::Result<()> {
        let mac = format!(
            "02:00:00:00:00:{:02x}",
            name.len() * 16 + name.as_bytes()[name.len() - 1] as usize % 16
        );
        let kind = if name.starts_with("ib") { "32" } else { "1" };
        self.class_dev(
            func,
            "net",
            name,
            &[
                ("speed", speed),
                ("address", &mac),
                ("type", kind),
                ("operstate", "up"),
            ],
        )
    }

    fn virtual_net(&self, name: &str) -> io::Result<()> {
        let dir = format!("sys/devices/virtual/net/{name}");
        self.file(&format!("{dir}/type"), "772\n")?;
        self.link(
            &format!("sys/class/net/{name}"),
            &format!("../../devices/virtual/net/{name}"),
        )
    }

    fn ncpus(&self) -> io::Result<u32> {
        let s = std::fs::read_to_string(self.0.join("sys/devices/system/cpu/possible"))?;
        Ok(s.trim()
            .rsplit('-')
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
            + 1)
    }

    fn node_cpus(&self, node: i32) -> io::Result<Vec<u32>> {
        let f = self
            .0
            .join(format!("sys/devices/system/node/node{node}/cpulist"));
        let s = std::fs::read_to_string(f)?;
        Ok(crate::topo::sysfs::parse_list(s.trim()).unwrap_or_default())
    }
}

/// A PCI function's first 256 bytes of config space: ids, class, header type, bridge bus
/// numbers and a PCIe capability with the link status, which is where hwloc reads them.
fn config(vendor: u16, device: u16, class: u32, bus: u8, port: Port) -> Vec<u8> {
    let mut c = vec![0u8; 256];
    c[0..2].copy_from_slice(&vendor.to_le_bytes());
    c[2..4].copy_from_slice(&device.to_le_bytes());
    c[4] = 0x06;
    c[9..12].copy_from_slice(&class.to_le_bytes()[..3]);
    let (kind, link) = match port {
        Port::Root(sec, sub) | Port::Up(sec, sub) => {
            c[0x0e] = 1;
            (c[0x18], c[0x19], c[0x1a]) = (bus, sec, sub);
            (if matches!(port, Port::Root(..)) { 4 } else { 5 }, (4, 16))
        }
        Port::Down(sec) => {
            c[0x0e] = 1;
            (c[0x18], c[0x19], c[0x1a]) = (bus, sec, sec);
            (6, (4, 16))
        }
        Port::End(g, w) => (0, (g, w)),
        Port::Integrated => (9, (0, 0)),
        Port::Legacy => return c,
    };
    c[6] = 0x10;
    c[0x34] = 0x40;
    c[0x40] = 0x10;
    c[0x42] = 2 | (kind << 4);
    let status = u16::from(link.0) | (u16::from(link.1) << 4);
    c[0x4c..0x4e].copy_from_slice(&status.to_le_bytes());
    c[0x52..0x54].copy_from_slice(&status.to_le_bytes());
    c
}

/// Linux's list form: `0-3,8-11`.
pub(crate) fn list(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Linux's mask form: hex, in comma-separated 32-bit groups, as wide as the possible CPUs.
fn mask(cpus: &[u32], ncpus: u32) -> String {
    let digits = ncpus.div_ceil(4).max(1) as usize;
    let mut nibbles = vec![0u8; digits];
    for &c in cpus {
        if let Some(n) = nibbles.get_mut((c / 4) as usize) {
            *n |= 1 << (c % 4);
        }
    }
    let hex: String = nibbles.iter().rev().map(|n| format!("{n:x}")).collect();
    let first = hex.len() % 8;
    let mut groups = Vec::new();
    if first > 0 {
        groups.push(&hex[..first]);
    }
    groups.extend(
        hex.as_bytes()[first..]
            .chunks(8)
            .map(|g| std::str::from_utf8(g).unwrap_or("")),
    );
    groups.join(",")
}

/// The CPU side: `packages × cores × threads` PUs numbered thread-major, per-core L1 and L2,
/// per-package L3, a NUMA node per package.
fn cpus(fs: &Fs, packages: u32, cores: u32, threads: u32) -> io::Result<()> {
    let n = packages * cores * threads;
    let cpu_of = |p: u32, c: u32, t: u32| t * packages * cores + p * cores + c;
    let all: Vec<u32> = (0..n).collect();
    let base = "sys/devices/system/cpu";
    for f in ["online", "possible", "present"] {
        fs.file(&format!("{base}/{f}"), format!("{}\n", list(&all)))?;
    }
    fs.file(&format!("{base}/offline"), "\n")?;
    let sorted = |v: Vec<u32>| {
        let mut v = v;
        v.sort_unstable();
        v
    };
    let mut cpuinfo = String::new();
    for p in 0..packages {
        let pkg = sorted(
            (0..cores)
                .flat_map(|c| (0..threads).map(move |t| cpu_of(p, c, t)))
                .collect(),
        );
        for c in 0..cores {
            let core = sorted((0..threads).map(|t| cpu_of(p, c, t)).collect());
            for t in 0..threads {
                let cpu = cpu_of(p, c, t);
                let d = format!("{base}/cpu{cpu}");
                if cpu > 0 {
                    fs.file(&format!("{d}/online"), "1\n")?;
                }
                let topo = [
                    ("physical_package_id", p.to_string()),
                    ("core_id", c.to_string()),
                    ("core_cpus_list", list(&core)),
                    ("core_cpus", mask(&core, n)),
                    ("thread_siblings_list", list(&core)),
                    ("thread_siblings", mask(&core, n)),
                    ("package_cpus_list", list(&pkg)),
                    ("package_cpus", mask(&pkg, n)),
                    ("core_siblings_list", list(&pkg)),
                    ("core_siblings", mask(&pkg, n)),
                ];
                for (f, v) in topo {
                    fs.file(&format!("{d}/topology/{f}"), format!("{v}\n"))?;
                }
                let caches = [
                    (1, "Data", "48K", &core, 12),
                    (1, "Instruction", "32K", &core, 8),
                    (2, "Unified", "2048K", &core, 16),
                    (3, "Unified", "30720K", &pkg, 15),
                ];
                for (k, (level, ty, size, shared, ways)) in caches.into_iter().enumerate() {
                    let id = if level == 3 { p } else { p * cores + c };
                    let files = [
                        ("level", level.to_string()),
                        ("type", ty.to_string()),
                        ("size", size.to_string()),
                        ("shared_cpu_list", list(shared)),
                        ("shared_cpu_map", mask(shared, n)),
                        ("coherency_line_size", "64".into()),
                        ("ways_of_associativity", ways.to_string()),
                        ("id", id.to_string()),
                    ];
                    for (f, v) in files {
                        fs.file(&format!("{d}/cache/index{k}/{f}"), format!("{v}\n"))?;
                    }
                }
                cpuinfo += &format!(
                    "processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Fixture CPU\nphysical id\t: {p}\ncore id\t\t: {c}\ncpu cores\t: {cores}\n\n"
                );
            }
        }
        let nd = format!("sys/devices/system/node/node{p}");
        fs.file(&format!("{nd}/cpulist"), format!("{}\n", list(&pkg)))?;
        fs.file(&format!("{nd}/cpumap"), format!("{}\n", mask(&pkg, n)))?;
        let kib = 64u64 << 20;
        fs.file(
            &format!("{nd}/meminfo"),
            format!("Node {p} MemTotal:       {kib} kB\nNode {p} MemFree:        {} kB\nNode {p} MemUsed:        {} kB\n", kib / 2, kib / 2),
        )?;
        let dist: Vec<String> = (0..packages)
            .map(|q| if q == p { "10".into() } else { "21".into() })
            .collect();
        fs.file(&format!("{nd}/distance"), format!("{}\n", dist.join(" ")))?;
    }
    let nodes: Vec<u32> = (0..packages).collect();
    for f in [
        "online",
        "possible",
        "has_cpu",
        "has_memory",
        "has_normal_memory",
    ] {
        fs.file(
            &format!("sys/devices/system/node/{f}"),
            format!("{}\n", list(&nodes)),
        )?;
    }
    fs.file("proc/cpuinfo", cpuinfo)?;
    fs.file(
        "proc/meminfo",
        format!(
            "MemTotal:       {} kB\n",
            (64u64 << 20) * u64::from(packages)
        ),
    )
}
