//! The topology model: one arena of objects in a tree, as hwloc sees a machine, and the links
//! (NVLink and the like) that the tree cannot express.
//!
//! The CPU side is always `Machine → Package → NumaNode → Core → Pu`; a NUMA node spanning
//! packages (rare) hangs under the machine. Caches are not tree levels (hwloc's cache levels
//! differ between vendors and would make every walk vendor-specific): they are listed with the
//! PUs that share them. The I/O side hangs under the NUMA node it is local to, or under the
//! machine when the firmware does not say: `HostBridge → PciBridge* → PciDevice → OsDevice*`,
//! where a PCIe switch appears as one upstream bridge with one bridge per downstream port, as in
//! sysfs and hwloc.
//!
//! Serialisable (serde) so that `rcomm-topo --dump` can write it and `RCOMM_TOPO_FILE` read it.

use serde::{Deserialize, Serialize};

/// Index of an object in [`Topology::objects`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ObjId(pub u32);

/// Where a topology came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// rcomm's sysfs reader, under this root (`/` on a live machine, a fixture tree in tests).
    Sysfs {
        /// The file-system root the reader read `sys/` under.
        root: String,
    },
    /// hwloc (feature `hwloc`): the live machine, or an XML export.
    Hwloc {
        /// The XML file, if one was loaded.
        xml: Option<String>,
    },
    /// A file in rcomm's own form (`rcomm-topo --dump`, `RCOMM_TOPO_FILE`).
    File {
        /// Its path.
        path: String,
    },
    /// Built by hand (tests, the planner).
    Manual,
}

/// A PCI address: domain, bus, device, function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PciAddr {
    /// PCI domain (segment).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device number (0–31).
    pub dev: u8,
    /// Function number (0–7).
    pub func: u8,
}

/// A PCIe link's current state.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PcieLink {
    /// Transfer rate per lane in GT/s (2.5, 5, 8, 16, 32, 64).
    pub gts: f32,
    /// Lanes.
    pub width: u8,
}

/// What an operating-system device is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OsDevKind {
    /// A network interface (`eth0`); link speed in Mbit/s where the kernel knows it.
    Net {
        /// Link speed in Mbit/s.
        speed_mbps: Option<u64>,
    },
    /// An InfiniBand / RoCE HCA (`mlx5_0`).
    Ib,
    /// A GPU: `cuda0` where hwloc has a CUDA device, else `gpuN` by PCI address order.
    Gpu,
    /// A block device or anything else; kept so that the tree is complete.
    Other,
}

/// An object's kind and kind-specific attributes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjKind {
    /// The whole machine (always object 0).
    Machine,
    /// A processor package (socket).
    Package,
    /// A NUMA node with its local memory.
    NumaNode {
        /// Local memory in bytes (0 where unknown).
        memory_bytes: u64,
    },
    /// A physical core.
    Core,
    /// A processing unit (hardware thread); `os_index` is the Linux CPU number.
    Pu,
    /// A PCI host bridge (root complex): the CPU-side end of a PCIe hierarchy.
    HostBridge,
    /// A PCI-to-PCI bridge: a root port or a PCIe switch port.
    PciBridge {
        /// Its own PCI address.
        addr: PciAddr,
    },
    /// A PCI function (GPU, NIC, NVMe, …).
    PciDevice {
        /// Its address.
        addr: PciAddr,
        /// The 16-bit class (base class << 8 | subclass): 0x0200 Ethernet, 0x0207 InfiniBand,
        /// 0x0302 3D controller (datacenter GPUs), 0x0300 VGA.
        class: u16,
        /// PCI vendor id (0x10de NVIDIA, 0x15b3 Mellanox/NVIDIA networking).
        vendor: u16,
        /// PCI device id.
        device: u16,
        /// The link to its parent, where known.
        link: Option<PcieLink>,
    },
    /// An operating-system device on a PCI function: `eth0`, `mlx5_0`, a GPU.
    OsDevice {
        /// What it is.
        kind: OsDevKind,
    },
}

/// One object of the tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Obj {
    /// Its kind and attributes.
    pub kind: ObjKind,
    /// The parent (`None` only for the machine).
    pub parent: Option<ObjId>,
    /// Children in discovery order (CPU objects sorted by their first PU).
    pub children: Vec<ObjId>,
    /// The OS's number for it: CPU number for PUs, node number for NUMA nodes, package id,
    /// core id (unique only within its package). `None` for I/O objects.
    pub os_index: Option<u32>,
    /// Name: OS devices' names (`eth0`, `mlx5_0`, `cuda0`), else empty.
    pub name: String,
    /// The PUs (Linux CPU numbers, sorted) of a CPU object, or the PUs close to an I/O object
    /// (its NUMA node's, or the machine's when locality is unknown).
    pub cpuset: Vec<u32>,
}

/// A cache and the PUs sharing it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    /// 1, 2, 3 (4 for a memory-side cache).
    pub level: u8,
    /// Size in bytes.
    pub size_bytes: u64,
    /// PUs sharing it (sorted Linux CPU numbers).
    pub cpuset: Vec<u32>,
}

/// What kind of link a [`Link`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// NVLink between two GPUs (or a GPU and an NVSwitch), `lanes` bonded links.
    NvLink {
        /// Bonded links: the `#` of `NV#`.
        lanes: u8,
    },
}

/// A direct link between two objects outside the PCI tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// One end (an OS device or PCI device).
    pub a: ObjId,
    /// The other end.
    pub b: ObjId,
    /// What it is.
    pub kind: LinkKind,
    /// Bandwidth per direction in GB/s, where known.
    pub bandwidth_gbs: Option<f64>,
}

/// A machine's topology.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Where it came from.
    pub source: Source,
    /// The host name it describes (empty when unknown).
    pub hostname: String,
    /// Every object; `objects[0]` is the machine.
    pub objects: Vec<Obj>,
    /// Caches with the PUs that share them.
    pub caches: Vec<Cache>,
    /// Links outside the PCI tree.
    pub links: Vec<Link>,
}

impl Topology {
    /// An empty machine (object 0), to be filled by a reader or by hand.
    pub fn new(source: Source, hostname: impl Into<String>) -> Self {
        Topology {
            source,
            hostname: hostname.into(),
            objects: vec![Obj {
                kind: ObjKind::Machine,
                parent: None,
                children: Vec::new(),
                os_index: None,
                name: String::new(),
                cpuset: Vec::new(),
            }],
            caches: Vec::new(),
            links: Vec::new(),
        }
    }

    /// The machine object.
    pub const MACHINE: ObjId = ObjId(0);

    /// Adds `obj` under `parent` and returns its id. The caller keeps cpusets consistent
    /// (readers fill them, [`Topology::fill_cpusets`] derives CPU objects' from their PUs).
    pub fn add(
        &mut self,
        parent: ObjId,
        kind: ObjKind,
        os_index: Option<u32>,
        name: impl Into<String>,
    ) -> ObjId {
        let id = ObjId(self.objects.len() as u32);
        self.objects.push(Obj {
            kind,
            parent: Some(parent),
            children: Vec::new(),
            os_index,
            name: name.into(),
            cpuset: Vec::new(),
        });
        self.objects[parent.0 as usize].children.push(id);
        id
    }

    /// The object `id`. Panics on an id from another topology, like slice indexing.
    pub fn obj(&self, id: ObjId) -> &Obj {
        &self.objects[id.0 as usize]
    }

    /// Every object id, in arena order.
    pub fn ids(&self) -> impl Iterator<Item = ObjId> + '_ {
        (0..self.objects.len() as u32).map(ObjId)
    }

    /// Ids of the objects whose kind satisfies `pred`, in arena order.
    pub fn filter<'a>(
        &'a self,
        pred: impl Fn(&ObjKind) -> bool + 'a,
    ) -> impl Iterator<Item = ObjId> + 'a {
        self.ids().filter(move |&i| pred(&self.obj(i).kind))
    }

    /// The packages, NUMA nodes, cores or PUs (`kind` compared by variant only).
    pub fn of_kind<'a>(&'a self, kind: &'a ObjKind) -> impl Iterator<Item = ObjId> + 'a {
        self.filter(move |k| std::mem::discriminant(k) == std::mem::discriminant(kind))
    }

    /// Count of objects of `kind`'s variant.
    pub fn count(&self, kind: &ObjKind) -> usize {
        self.of_kind(kind).count()
    }

    /// `id` and its ancestors up to the machine, nearest first.
    pub fn ancestors(&self, id: ObjId) -> Vec<ObjId> {
        let mut v = vec![id];
        let mut cur = id;
        while let Some(p) = self.obj(cur).parent {
            v.push(p);
            cur = p;
        }
        v
    }

    /// The NUMA node `id` is in or local to (itself, an ancestor), if any.
    pub fn numa_of(&self, id: ObjId) -> Option<ObjId> {
        self.ancestors(id)
            .into_iter()
            .find(|&a| matches!(self.obj(a).kind, ObjKind::NumaNode { .. }))
    }

    /// Derives every CPU object's cpuset from the PUs below it, and every I/O object's from its
    /// nearest CPU ancestor; sorts children of CPU objects by first PU.
    pub fn fill_cpusets(&mut self) {
        fn walk(t: &mut Topology, id: ObjId) -> Vec<u32> {
            let children = t.objects[id.0 as usize].children.clone();
            let is_cpu = matches!(
                t.obj(id).kind,
                ObjKind::Machine
                    | ObjKind::Package
                    | ObjKind::NumaNode { .. }
                    | ObjKind::Core
                    | ObjKind::Pu
            );
            let mut set = Vec::new();
            if matches!(t.obj(id).kind, ObjKind::Pu) {
                set.extend(t.obj(id).os_index);
            }
            for c in children {
                let s = walk(t, c);
                if is_cpu && is_cpu_kind(&t.obj(c).kind) {
                    set.extend(s);
                }
            }
            set.sort_unstable();
            set.dedup();
            if is_cpu {
                t.objects[id.0 as usize].cpuset = set.clone();
            }
            set
        }
        fn is_cpu_kind(k: &ObjKind) -> bool {
            matches!(
                k,
                ObjKind::Package | ObjKind::NumaNode { .. } | ObjKind::Core | ObjKind::Pu
            )
        }
        walk(self, Self::MACHINE);
        for id in self.ids().collect::<Vec<_>>() {
            if is_cpu_kind(&self.obj(id).kind) || id == Self::MACHINE {
                let mut children = self.obj(id).children.clone();
                children.sort_by_key(|&c| {
                    let o = self.obj(c);
                    (
                        !is_cpu_kind(&o.kind),
                        o.cpuset.first().copied().unwrap_or(u32::MAX),
                    )
                });
                self.objects[id.0 as usize].children = children;
                continue;
            }
            let near = self
                .ancestors(id)
                .into_iter()
                .skip(1)
                .find(|&a| a == Self::MACHINE || is_cpu_kind(&self.obj(a).kind))
                .unwrap_or(Self::MACHINE);
            self.objects[id.0 as usize].cpuset = self.obj(near).cpuset.clone();
        }
    }

    /// Structural checks every reader's output and every loaded file must pass: object 0 is
    /// the only machine and the only root, parents and children agree, ids are in range, the
    /// CPU side nests as documented and links join existing objects. A file that fails is
    /// refused with the reason, never used.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.objects.len();
        if n == 0 || !matches!(self.objects[0].kind, ObjKind::Machine) {
            return Err("object 0 must be the machine".into());
        }
        if self.objects[0].parent.is_some() {
            return Err("the machine has no parent".into());
        }
        // Linear checks throughout: a loaded file can hold a million objects.
        let mut listed = vec![false; n];
        for (i, o) in self.objects.iter().enumerate() {
            if i > 0 {
                let Some(p) = o.parent else {
                    return Err(format!("object {i} has no parent"));
                };
                if p.0 as usize >= n || p.0 as usize == i {
                    return Err(format!("object {i}: parent {} out of range", p.0));
                }
                if matches!(o.kind, ObjKind::Machine) {
                    return Err(format!("object {i} is a second machine"));
                }
            }
            for &c in &o.children {
                if c.0 as usize >= n || self.objects[c.0 as usize].parent != Some(ObjId(i as u32)) {
                    return Err(format!("object {i}: child {} does not point back", c.0));
                }
                if std::mem::replace(&mut listed[c.0 as usize], true) {
                    return Err(format!("object {i} lists child {} twice", c.0));
                }
            }
            let parent_kind = o.parent.map(|p| &self.objects[p.0 as usize].kind);
            let ok = matches!(
                (&o.kind, parent_kind),
                (ObjKind::Machine, None)
                    | (ObjKind::Package, Some(ObjKind::Machine))
                    | (
                        ObjKind::NumaNode { .. },
                        Some(ObjKind::Machine | ObjKind::Package)
                    )
                    | (
                        ObjKind::Core,
                        Some(ObjKind::NumaNode { .. } | ObjKind::Package)
                    )
                    | (ObjKind::Pu, Some(ObjKind::Core))
                    | (
                        ObjKind::HostBridge,
                        Some(ObjKind::Machine | ObjKind::Package | ObjKind::NumaNode { .. })
                    )
                    | (
                        ObjKind::PciBridge { .. } | ObjKind::PciDevice { .. },
                        Some(ObjKind::HostBridge | ObjKind::PciBridge { .. })
                    )
                    | (
                        ObjKind::OsDevice { .. },
                        Some(ObjKind::PciDevice { .. } | ObjKind::Machine)
                    )
            );
            if !ok {
                return Err(format!(
                    "object {i} ({:?}) cannot sit under {parent_kind:?}",
                    o.kind
                ));
            }
        }
        // Each object is listed once, by its parent (checked above). Then a walk down from the
        // machine reaches exactly the objects that are not on a cycle.
        if let Some(i) = (1..n).find(|&i| !listed[i]) {
            return Err(format!("object {i} is not among its parent's children"));
        }
        let mut reached = vec![false; n];
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            reached[i] = true;
            stack.extend(self.objects[i].children.iter().map(|c| c.0 as usize));
        }
        if let Some(i) = (0..n).find(|&i| !reached[i]) {
            return Err(format!("object {i} is on a cycle"));
        }
        for l in &self.links {
            if l.a.0 as usize >= n || l.b.0 as usize >= n || l.a == l.b {
                return Err("a link joins missing objects".into());
            }
            if l.bandwidth_gbs
                .is_some_and(|b| !(b.is_finite() && b >= 0.0))
            {
                return Err(format!(
                    "a link's bandwidth {:?} is not a rate",
                    l.bandwidth_gbs
                ));
            }
        }
        // A rate like 1e39 parses as infinity: refused, so every accepted model writes back.
        for (i, o) in self.objects.iter().enumerate() {
            if let ObjKind::PciDevice { link: Some(l), .. } = &o.kind
                && !(l.gts.is_finite() && l.gts >= 0.0)
            {
                return Err(format!("object {i}: PCIe rate {} GT/s", l.gts));
            }
        }
        Ok(())
    }
}
