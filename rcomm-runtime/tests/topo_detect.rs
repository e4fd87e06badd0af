//! Topology detection: rcomm's sysfs reader on the fixture trees, its refusals of broken
//! trees, rcomm's JSON form, and (feature `hwloc`) hwloc's reading of the same fixtures.

use rcomm_runtime::topo::{
    ObjId, ObjKind, OsDevKind, PciAddr, TopoError, Topology, fixture, sysfs,
};
use std::path::{Path, PathBuf};

/// A fresh directory under the system's temp dir, removed when dropped.
struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "rcomm-topo-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tree(name: &str) -> Tmp {
    let t = Tmp::new(name);
    fixture::write(name, &t.0).unwrap();
    t
}

/// The sysfs reader's view of fixture `name`, read once per test process (writing a tree
/// takes a while on a busy disk).
fn read(name: &str) -> &'static Topology {
    use std::sync::OnceLock;
    static TOPOS: [OnceLock<Topology>; 2] = [OnceLock::new(), OnceLock::new()];
    let i = fixture::NAMES.iter().position(|n| *n == name).unwrap();
    TOPOS[i].get_or_init(|| sysfs::read(&tree(name).0).unwrap())
}

fn count(t: &Topology, k: ObjKind) -> usize {
    t.count(&k)
}

fn cpus(s: &str) -> Vec<u32> {
    sysfs::parse_list(s).unwrap()
}

fn os_devs(t: &Topology) -> Vec<(String, OsDevKind, ObjId)> {
    t.ids()
        .filter_map(|i| match &t.obj(i).kind {
            ObjKind::OsDevice { kind } => Some((t.obj(i).name.clone(), kind.clone(), i)),
            _ => None,
        })
        .collect()
}

fn addr_of(t: &Topology, id: ObjId) -> Option<PciAddr> {
    match t.obj(id).kind {
        ObjKind::PciDevice { addr, .. } | ObjKind::PciBridge { addr } => Some(addr),
        _ => None,
    }
}

/// The upstream port of the PCIe switch above `dev` (its grandparent bridge), if any.
fn switch_of(t: &Topology, dev: ObjId) -> Option<PciAddr> {
    let a = t.ancestors(dev);
    let dp = a.get(1)?;
    let up = a.get(2)?;
    matches!(t.obj(*dp).kind, ObjKind::PciBridge { .. })
        .then(|| addr_of(t, *up))
        .flatten()
}

fn numa_index(t: &Topology, id: ObjId) -> Option<u32> {
    t.numa_of(id).and_then(|n| t.obj(n).os_index)
}

#[test]
fn server2s_cpu_side() {
    let t = read("server2s");
    assert_eq!(t.hostname, "server2s");
    assert_eq!(count(t, ObjKind::Package), 2);
    assert_eq!(count(t, ObjKind::NumaNode { memory_bytes: 0 }), 2);
    assert_eq!(count(t, ObjKind::Core), 8);
    assert_eq!(count(t, ObjKind::Pu), 16);
    let pk: Vec<_> = t.of_kind(&ObjKind::Package).collect();
    assert_eq!(t.obj(pk[0]).cpuset, cpus("0-3,8-11"));
    assert_eq!(t.obj(pk[1]).cpuset, cpus("4-7,12-15"));
    for n in t.of_kind(&ObjKind::NumaNode { memory_bytes: 0 }) {
        let o = t.obj(n);
        assert!(matches!(o.kind, ObjKind::NumaNode { memory_bytes } if memory_bytes == 64 << 30));
        assert!(matches!(t.obj(o.parent.unwrap()).kind, ObjKind::Package));
        assert_eq!(o.cpuset, t.obj(o.parent.unwrap()).cpuset);
    }
    let core0 = t.of_kind(&ObjKind::Core).next().unwrap();
    assert_eq!(t.obj(core0).cpuset, vec![0, 8]);
    // L1d and L2 per core, L3 per package; no instruction caches.
    let by_level = |l| t.caches.iter().filter(|c| c.level == l).count();
    assert_eq!((by_level(1), by_level(2), by_level(3)), (8, 8, 2));
    let l3: Vec<_> = t.caches.iter().filter(|c| c.level == 3).collect();
    assert_eq!(l3[0].cpuset, cpus("0-3,8-11"));
    assert_eq!(l3[0].size_bytes, 30 << 20);
    assert!(
        t.caches
            .iter()
            .any(|c| c.level == 1 && c.size_bytes == 48 << 10 && c.cpuset == [1, 9])
    );
}

#[test]
fn server2s_io_side() {
    let t = read("server2s");
    let devs = os_devs(t);
    let names: Vec<_> = devs.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(names, ["eth0", "eth1"], "lo is virtual: no device");
    assert_eq!(
        devs[0].1,
        OsDevKind::Net {
            speed_mbps: Some(25000)
        }
    );
    assert_eq!(
        devs[1].1,
        OsDevKind::Net { speed_mbps: None },
        "speed -1: link down"
    );
    assert_eq!(numa_index(t, devs[0].2), Some(0));
    assert_eq!(numa_index(t, devs[1].2), Some(1));
    // eth0: PCI function under a root port under a host bridge under NUMA node 0.
    let nic = t.obj(devs[0].2).parent.unwrap();
    let ObjKind::PciDevice {
        addr,
        class,
        vendor,
        link,
        ..
    } = t.obj(nic).kind
    else {
        panic!("eth0 not on a PCI function")
    };
    assert_eq!((addr.bus, class, vendor), (1, 0x0200, 0x8086));
    let link = link.unwrap();
    assert_eq!((link.gts, link.width), (16.0, 8));
    let a = t.ancestors(nic);
    assert!(matches!(t.obj(a[1]).kind, ObjKind::PciBridge { .. }));
    assert!(matches!(t.obj(a[2]).kind, ObjKind::HostBridge));
    assert!(matches!(t.obj(a[3]).kind, ObjKind::NumaNode { .. }));
    assert_eq!(t.obj(devs[0].2).cpuset, cpus("0-3,8-11"));
    // The USB controller is filtered out, and with it nothing else on its host bridge.
    assert_eq!(count(t, ObjKind::HostBridge), 2);
    let pci_devs = t.filter(|k| matches!(k, ObjKind::PciDevice { .. })).count();
    assert_eq!(pci_devs, 2);
}

#[test]
fn dgx_cpu_side() {
    let t = read("dgx");
    assert_eq!(count(t, ObjKind::Package), 2);
    assert_eq!(count(t, ObjKind::NumaNode { memory_bytes: 0 }), 2);
    assert_eq!(count(t, ObjKind::Core), 16);
    assert_eq!(count(t, ObjKind::Pu), 32);
    let numa: Vec<_> = t.of_kind(&ObjKind::NumaNode { memory_bytes: 0 }).collect();
    assert_eq!(t.obj(numa[1]).cpuset, cpus("8-15,24-31"));
    assert_eq!(t.caches.len(), 16 + 16 + 2);
}

#[test]
fn dgx_gpus_and_nics_sit_under_their_switches() {
    let t = read("dgx");
    let devs = os_devs(t);
    let gpus: Vec<_> = devs.iter().filter(|d| d.1 == OsDevKind::Gpu).collect();
    let ibs: Vec<_> = devs.iter().filter(|d| d.1 == OsDevKind::Ib).collect();
    let gpu_names: Vec<_> = gpus.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(
        gpu_names,
        [
            "gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6", "gpu7"
        ]
    );
    let ib_names: Vec<_> = ibs.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(ib_names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
    for s in 0..4 {
        let (g0, g1, hca) = (gpus[2 * s].2, gpus[2 * s + 1].2, ibs[s].2);
        let fun = |d: ObjId| t.obj(d).parent.unwrap();
        let sw = switch_of(t, fun(hca)).unwrap();
        assert_eq!(
            switch_of(t, fun(g0)),
            Some(sw),
            "gpu{} on mlx5_{s}'s switch",
            2 * s
        );
        assert_eq!(switch_of(t, fun(g1)), Some(sw));
        let node = if s < 2 { 0 } else { 1 };
        for d in [g0, g1, hca] {
            assert_eq!(numa_index(t, d), Some(node));
        }
        // The switch's upstream port hangs under a root port under a host bridge.
        let up = t.ancestors(fun(hca))[2];
        let a = t.ancestors(up);
        assert!(matches!(t.obj(a[1]).kind, ObjKind::PciBridge { .. }));
        assert!(matches!(t.obj(a[2]).kind, ObjKind::HostBridge));
        // The IPoIB interface is on the same function as the HCA.
        let ib = devs.iter().find(|d| d.0 == format!("ib{s}")).unwrap();
        assert_eq!(fun(ib.2), fun(hca));
        assert_eq!(
            ib.1,
            OsDevKind::Net {
                speed_mbps: Some(200000)
            }
        );
        let ObjKind::PciDevice {
            class,
            vendor,
            link,
            ..
        } = t.obj(fun(hca)).kind
        else {
            panic!()
        };
        assert_eq!((class, vendor), (0x0207, 0x15b3));
        let link = link.unwrap();
        assert_eq!((link.gts, link.width), (16.0, 16));
        let ObjKind::PciDevice { class, vendor, .. } = t.obj(fun(g0)).kind else {
            panic!()
        };
        assert_eq!((class, vendor), (0x0302, 0x10de));
    }
    // Management NIC directly on host bridge 0; the BMC's VGA is kept but is no GPU.
    let eth0 = devs.iter().find(|d| d.0 == "eth0").unwrap();
    let f = t.obj(eth0.2).parent.unwrap();
    assert!(matches!(
        t.obj(t.obj(f).parent.unwrap()).kind,
        ObjKind::HostBridge
    ));
    assert_eq!(numa_index(t, eth0.2), Some(0));
    let vga = t
        .filter(|k| matches!(k, ObjKind::PciDevice { class: 0x0300, .. }))
        .count();
    assert_eq!(vga, 1);
    assert_eq!(count(t, ObjKind::HostBridge), 4);
}

/// Reads the tree at `root` with `rel` overwritten by `content`, then puts `rel` back.
fn read_with(root: &Path, rel: &str, content: &str) -> Result<Topology, TopoError> {
    let p = root.join(rel);
    let old = std::fs::read(&p).unwrap();
    std::fs::write(&p, content).unwrap();
    let r = sysfs::read(root);
    std::fs::write(&p, old).unwrap();
    r
}

#[test]
fn garbage_and_missing_files_are_errors_naming_the_file() {
    let cases = [
        ("sys/devices/system/cpu/cpu3/topology/core_id", "three\n"),
        ("sys/devices/system/cpu/online", "0-x\n"),
        ("sys/devices/system/cpu/cpu5/cache/index2/size", "lots\n"),
        ("sys/devices/system/node/node1/meminfo", "nothing here\n"),
        (
            "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/class",
            "0302\n",
        ),
        (
            "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:02.0/0000:85:00.0/numa_node",
            "x\n",
        ),
        (
            "sys/devices/pci0000:20/0000:20:01.0/0000:21:00.0/0000:22:00.0/0000:23:00.0/current_link_speed",
            "fast\n",
        ),
        ("sys/devices/pci0000:00/0000:00:04.0/net/eth0/speed", "1G\n"),
    ];
    let t = tree("dgx");
    for (rel, content) in cases {
        let e = read_with(&t.0, rel, content).unwrap_err();
        let file = Path::new(rel).file_name().unwrap().to_str().unwrap();
        let msg = e.to_string();
        assert!(matches!(e, TopoError::Parse { .. }), "{rel}: {e:?}");
        assert!(
            msg.contains(file) && msg.contains(content.trim()),
            "{rel}: {msg}"
        );
    }
    std::fs::remove_file(t.0.join("sys/devices/system/cpu/cpu7/topology/physical_package_id"))
        .unwrap();
    let e = sysfs::read(&t.0).unwrap_err();
    assert!(
        matches!(e, TopoError::Io { .. })
            && e.to_string().contains("cpu7/topology/physical_package_id"),
        "{e}"
    );
    std::fs::write(
        t.0.join("sys/devices/system/cpu/cpu7/topology/physical_package_id"),
        [0xff, 0xfe],
    )
    .unwrap();
    let e = sysfs::read(&t.0).unwrap_err();
    assert!(e.to_string().contains("not text"), "{e}");
}

#[test]
fn unknown_numa_locality_puts_the_host_bridge_under_the_machine() {
    let t = tree("server2s");
    let f = "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/numa_node";
    std::fs::write(t.0.join(f), "-1\n").unwrap();
    std::fs::write(
        t.0.join("sys/devices/pci0000:80/0000:80:01.0/numa_node"),
        "-1\n",
    )
    .unwrap();
    let topo = sysfs::read(&t.0).unwrap();
    let eth1 = os_devs(&topo).into_iter().find(|d| d.0 == "eth1").unwrap();
    let hb = topo.ancestors(eth1.2)[3];
    assert!(matches!(topo.obj(hb).kind, ObjKind::HostBridge));
    assert_eq!(topo.obj(hb).parent, Some(Topology::MACHINE));
    assert_eq!(topo.obj(eth1.2).cpuset, cpus("0-15"));
}

#[test]
fn offline_cpus_and_missing_numa_are_handled() {
    let t = tree("server2s");
    std::fs::write(t.0.join("sys/devices/system/cpu/online"), "0-14\n").unwrap();
    let topo = sysfs::read(&t.0).unwrap();
    assert_eq!(count(&topo, ObjKind::Pu), 15);
    assert!(topo.caches.iter().all(|c| !c.cpuset.contains(&15)));
    std::fs::remove_dir_all(t.0.join("sys/devices/system/node")).unwrap();
    let topo = sysfs::read(&t.0).unwrap();
    assert_eq!(count(&topo, ObjKind::NumaNode { memory_bytes: 0 }), 0);
    let core = topo.of_kind(&ObjKind::Core).next().unwrap();
    assert!(matches!(
        topo.obj(topo.obj(core).parent.unwrap()).kind,
        ObjKind::Package
    ));
    // Without NUMA nodes, the I/O is under the machine.
    let eth0 = os_devs(&topo).into_iter().find(|d| d.0 == "eth0").unwrap();
    assert_eq!(topo.ancestors(eth0.2).last(), Some(&Topology::MACHINE));
    assert_eq!(
        topo.obj(topo.ancestors(eth0.2)[3]).parent,
        Some(Topology::MACHINE)
    );
}

#[test]
fn symlinks_escaping_the_root_are_refused() {
    for target in [
        "../../../../../../../../etc",
        "/../../etc",
        "../../../../..",
    ] {
        let t = tree("server2s");
        let link = t.0.join("sys/bus/pci/devices/0000:01:00.0");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(target, &link).unwrap();
        let e = sysfs::read(&t.0).unwrap_err();
        assert!(matches!(e, TopoError::Escape { .. }), "{target}: {e:?}");
        assert!(e.to_string().contains("0000:01:00.0"), "{e}");
    }
    // An absolute link is taken relative to the root, as the kernel would inside a chroot.
    let t = tree("server2s");
    let link = t.0.join("sys/class/net/eth0");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/net/eth0",
        &link,
    )
    .unwrap();
    let topo = sysfs::read(&t.0).unwrap();
    assert!(os_devs(&topo).iter().any(|d| d.0 == "eth0"));
    // A loop is an error, not a hang.
    let link = t.0.join("sys/class/net/eth0");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("eth0", &link).unwrap();
    let e = sysfs::read(&t.0).unwrap_err();
    assert!(e.to_string().contains("symbolic links"), "{e}");
}

#[test]
fn this_machine_reads() {
    let t = sysfs::read(Path::new("/")).unwrap();
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(count(&t, ObjKind::Pu) >= n);
    assert!(count(&t, ObjKind::Package) >= 1 && count(&t, ObjKind::Core) >= 1);
    assert!(!t.hostname.is_empty());
}

#[test]
fn json_round_trips_and_bad_json_is_refused() {
    for name in fixture::NAMES {
        let t = read(name);
        assert_eq!(&Topology::from_json(&t.to_json()).unwrap(), t);
    }
    let t = read("server2s");
    for bad in ["", "{", "[]", "{\"source\": 1}", &t.to_json()[..100]] {
        let e = Topology::from_json(bad).unwrap_err();
        assert!(matches!(e, TopoError::File { .. }), "{e:?}");
    }
    // Well-formed but inconsistent: a PU claims a parent that does not list it.
    let mut broken = t.clone();
    let pu = broken.of_kind(&ObjKind::Pu).next().unwrap();
    broken.objects[pu.0 as usize].parent = Some(Topology::MACHINE);
    let e = Topology::from_json(&broken.to_json()).unwrap_err();
    assert!(e.to_string().contains("object"), "{e}");
    // A rate too large for f64 reads as infinity and could not be written back: refused.
    let text = t.to_json();
    let at = text.find("\"gts\":").expect("the fixture has a PCIe link");
    let end = at + text[at..].find([',', '}']).unwrap();
    let inf = format!("{}\"gts\":1e39{}", &text[..at], &text[end..]);
    let e = Topology::from_json(&inf).unwrap_err();
    assert!(e.to_string().contains("PCIe rate"), "{e}");
    let huge = " ".repeat(rcomm_runtime::topo::MAX_JSON + 1);
    let e = Topology::from_json(&huge).unwrap_err();
    assert!(e.to_string().contains("more than"), "{e}");
    // From a file, the source says which.
    let dir = Tmp::new("json");
    let f = dir.0.join("t.json");
    std::fs::write(&f, t.to_json()).unwrap();
    let back = Topology::load(&f).unwrap();
    assert_eq!(back.objects, t.objects);
    assert!(
        matches!(&back.source, rcomm_runtime::topo::Source::File { path } if path.ends_with("t.json"))
    );
    std::fs::write(&f, "{}").unwrap();
    let e = Topology::load(&f).unwrap_err();
    assert!(e.to_string().contains("t.json"), "{e}");
}

#[test]
fn detect_works_on_this_machine() {
    let t = rcomm_runtime::topo::detect().unwrap();
    let s = sysfs::read(Path::new("/")).unwrap();
    for k in [
        ObjKind::Package,
        ObjKind::NumaNode { memory_bytes: 0 },
        ObjKind::Core,
        ObjKind::Pu,
    ] {
        assert_eq!(t.count(&k), s.count(&k), "{k:?}");
    }
    #[cfg(feature = "hwloc")]
    {
        let h = rcomm_runtime::topo::hwloc::detect().unwrap();
        assert_eq!(cpu_signature(&h), cpu_signature(&s));
    }
}

#[cfg_attr(not(feature = "hwloc"), allow(dead_code))]
type CpuSig = (
    Vec<usize>,
    Vec<Vec<u32>>,
    Vec<(Option<u32>, Vec<u32>)>,
    Vec<Vec<u32>>,
);

#[cfg_attr(not(feature = "hwloc"), allow(dead_code))]
/// What must agree between readers on the CPU side: counts, and the PUs of every package,
/// NUMA node (with its number) and core.
fn cpu_signature(t: &Topology) -> CpuSig {
    let kinds = [
        ObjKind::Package,
        ObjKind::NumaNode { memory_bytes: 0 },
        ObjKind::Core,
        ObjKind::Pu,
    ];
    let sets = |k: &ObjKind| {
        let mut v: Vec<_> = t.of_kind(k).map(|i| t.obj(i).cpuset.clone()).collect();
        v.sort();
        v
    };
    let mut numa: Vec<_> = t
        .of_kind(&ObjKind::NumaNode { memory_bytes: 0 })
        .map(|i| (t.obj(i).os_index, t.obj(i).cpuset.clone()))
        .collect();
    numa.sort();
    (
        kinds.iter().map(|k| t.count(k)).collect(),
        sets(&ObjKind::Package),
        numa,
        sets(&ObjKind::Core),
    )
}

#[cfg_attr(not(feature = "hwloc"), allow(dead_code))]
/// What must agree on the I/O side: each GPU, HCA and network interface by name and kind
/// (speed aside: hwloc has none), its PCI function, its NUMA node and the switch above it.
#[allow(clippy::type_complexity)]
fn io_signature(
    t: &Topology,
) -> Vec<(
    String,
    String,
    Option<PciAddr>,
    Option<u32>,
    Option<PciAddr>,
)> {
    let mut v: Vec<_> = os_devs(t)
        .into_iter()
        .map(|(name, kind, id)| {
            let kind = match kind {
                OsDevKind::Net { .. } => "net".to_string(),
                k => format!("{k:?}"),
            };
            let f = t.obj(id).parent.unwrap();
            (
                name,
                kind,
                addr_of(t, f),
                numa_index(t, id),
                switch_of(t, f),
            )
        })
        .collect();
    v.sort();
    v
}

#[cfg(feature = "hwloc")]
#[test]
fn sysfs_reader_agrees_with_hwloc_on_the_fixtures() {
    for name in fixture::NAMES {
        let xml =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/topo/{name}.xml"));
        let h = rcomm_runtime::topo::hwloc::load_xml(&xml).unwrap();
        let s = read(name);
        assert_eq!(h.hostname, s.hostname);
        assert_eq!(cpu_signature(&h), cpu_signature(s), "{name}");
        assert_eq!(h.caches, s.caches, "{name}");
        assert_eq!(io_signature(&h), io_signature(s), "{name}");
        let pci = |t: &Topology| {
            let mut v: Vec<_> = t.ids().filter_map(|i| addr_of(t, i)).collect();
            v.sort();
            v
        };
        assert_eq!(
            pci(&h),
            pci(s),
            "{name}: the same PCI functions and bridges kept"
        );
        assert_eq!(h.count(&ObjKind::HostBridge), s.count(&ObjKind::HostBridge));
    }
}

#[cfg(feature = "hwloc")]
#[test]
fn hwloc_errors_are_errors() {
    let dir = Tmp::new("xml");
    let f = dir.0.join("bad.xml");
    std::fs::write(&f, "<topology>").unwrap();
    let e = rcomm_runtime::topo::hwloc::load_xml(&f).unwrap_err();
    assert!(
        matches!(e, TopoError::Hwloc(_)) && e.to_string().contains("bad.xml"),
        "{e}"
    );
    assert!(rcomm_runtime::topo::hwloc::load_xml(&dir.0.join("missing.xml")).is_err());
}
