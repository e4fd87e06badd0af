//! Where a host's ranks are bound, planned from the topology model (`rcomm_runtime::topo`)
//! restricted to the CPUs the launcher may use.
//!
//! Places are cores (all hardware threads of one core), NUMA nodes and packages, each listed
//! by its first allowed CPU. The plan, in Open MPI's manner:
//!
//! * Without `ppr`, rank `i` of the host takes place `i mod #places` of the `--bind-to` kind:
//!   by core this fills the cores in order (socket 0's cores before socket 1's on the usual
//!   Linux numbering) — Open MPI's by-core order, kept so that neighbouring ranks share caches;
//!   by `numa`/`socket` ranks go round the nodes or packages.
//! * `ppr:N:core|numa|socket`: ranks `N·g … N·g+N−1` go to the `g`-th core, NUMA node or
//!   package (mod their number); within a NUMA node or package the `j`-th of its ranks takes its
//!   `j`-th core. `--bind-to` then says how wide the binding is: that core (default), its NUMA
//!   node or its package.
//! * Default (no `--bind-to`): bind to cores when every rank gets a core of its own (under
//!   `ppr:N:core`, its share of one), else leave ranks unbound and let the OS spread them.
//! * Hosts of one job that run on one kernel (same boot id: network-namespace fake hosts,
//!   containers, `-H localhost,$(hostname)`) see the same CPUs, so they are planned as one
//!   host: host `h` plans all those hosts' ranks and takes its own slice, starting after the
//!   ranks of the earlier such hosts. So their ranks get distinct cores, and the default rule
//!   counts all of them (oversubscribed together means unbound).

use crate::cli::BindTo;
use crate::hosts::PprUnit;
use rcomm_runtime::topo::{ObjId, ObjKind, Topology};

/// One core's usable CPUs and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Core {
    cpus: Vec<usize>,
    numa: usize,
    package: usize,
}

/// The usable places of a host.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Places {
    cores: Vec<Core>,
    /// Per NUMA node (in order of first CPU), the indices of its cores.
    numas: Vec<Vec<usize>>,
    /// Per package, the indices of its cores.
    packages: Vec<Vec<usize>>,
}

fn index_of(list: &mut Vec<ObjId>, id: ObjId) -> usize {
    match list.iter().position(|&x| x == id) {
        Some(i) => i,
        None => {
            list.push(id);
            list.len() - 1
        }
    }
}

impl Places {
    /// The places of `topo` restricted to `allowed`. An allowed CPU the model does not know
    /// is a core of its own, in the first NUMA node and package.
    pub fn new(allowed: &[usize], topo: &Topology) -> Self {
        let mut cores: Vec<(usize, Core)> = Vec::new();
        let (mut numa_ids, mut pkg_ids) = (Vec::new(), Vec::new());
        let mut known = Vec::new();
        let mut core_ids: Vec<ObjId> = topo.of_kind(&ObjKind::Core).collect();
        core_ids.sort_by_key(|&c| topo.obj(c).cpuset.first().copied());
        for c in core_ids {
            let cpus: Vec<usize> = topo
                .obj(c)
                .cpuset
                .iter()
                .map(|&p| p as usize)
                .filter(|p| allowed.contains(p))
                .collect();
            known.extend(topo.obj(c).cpuset.iter().map(|&p| p as usize));
            let Some(&first) = cpus.first() else {
                continue;
            };
            let numa = index_of(&mut numa_ids, topo.numa_of(c).unwrap_or(Topology::MACHINE));
            let pkg = topo
                .ancestors(c)
                .into_iter()
                .find(|&a| matches!(topo.obj(a).kind, ObjKind::Package))
                .unwrap_or(Topology::MACHINE);
            let package = index_of(&mut pkg_ids, pkg);
            cores.push((
                first,
                Core {
                    cpus,
                    numa,
                    package,
                },
            ));
        }
        for &cpu in allowed.iter().filter(|c| !known.contains(c)) {
            let core = Core {
                cpus: vec![cpu],
                numa: 0,
                package: 0,
            };
            cores.push((cpu, core));
        }
        cores.sort_by_key(|(first, _)| *first);
        let cores: Vec<Core> = cores.into_iter().map(|(_, c)| c).collect();
        // Every index below the largest has a core (indices are handed out as cores are
        // found, and CPUs the model lacks join index 0), so group `k` is node/package `k`.
        let group = |key: fn(&Core) -> usize| {
            let n = cores.iter().map(key).max().map_or(0, |m| m + 1);
            let mut g = vec![Vec::new(); n];
            for (i, c) in cores.iter().enumerate() {
                g[key(c)].push(i);
            }
            g
        };
        Places {
            numas: group(|c| c.numa),
            packages: group(|c| c.package),
            cores,
        }
    }

    /// Usable cores.
    pub fn cores(&self) -> usize {
        self.cores.len()
    }

    /// NUMA nodes with usable cores.
    pub fn numas(&self) -> usize {
        self.numas.len()
    }

    /// Packages with usable cores.
    pub fn packages(&self) -> usize {
        self.packages.len()
    }

    fn cpus_of(&self, cores: &[usize]) -> Vec<usize> {
        let mut v: Vec<usize> = cores
            .iter()
            .flat_map(|&c| self.cores[c].cpus.iter().copied())
            .collect();
        v.sort_unstable();
        v
    }

    /// The cores of each place of `unit`.
    fn groups(&self, unit: PprUnit) -> Vec<Vec<usize>> {
        match unit {
            PprUnit::Core => (0..self.cores.len()).map(|c| vec![c]).collect(),
            PprUnit::Numa => self.numas.clone(),
            PprUnit::Socket => self.packages.clone(),
        }
    }

    /// The places a binding of kind `b` binds to, as core-index lists.
    fn places_of(&self, b: BindTo) -> Vec<Vec<usize>> {
        match b {
            BindTo::Numa => self.numas.clone(),
            BindTo::Socket => self.packages.clone(),
            BindTo::Core | BindTo::None => self.groups(PprUnit::Core),
        }
    }

    /// The `b`-wide place containing core `c`.
    fn widen(&self, c: usize, b: BindTo) -> Vec<usize> {
        match b {
            BindTo::Numa => self.cpus_of(&self.numas[self.cores[c].numa]),
            BindTo::Socket => self.cpus_of(&self.packages[self.cores[c].package]),
            BindTo::Core | BindTo::None => self.cores[c].cpus.clone(),
        }
    }
}

/// What one host plans for: its share of the ranks on its kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// Ranks of earlier hosts on the same kernel.
    pub offset: u32,
    /// This host's ranks.
    pub ranks: u32,
    /// All the job's ranks on this kernel (≥ offset + ranks).
    pub kernel_ranks: u32,
}

impl Share {
    /// A host alone on its kernel.
    pub fn alone(ranks: u32) -> Self {
        Share {
            offset: 0,
            ranks,
            kernel_ranks: ranks,
        }
    }
}

/// Per rank of `share`, the CPUs it is bound to (`None`: unbound), and a warning, if any.
/// `ppr` is `--map-by ppr:N:UNIT` as (N, UNIT).
pub fn plan(
    bind_to: Option<BindTo>,
    ppr: Option<(u32, PprUnit)>,
    share: Share,
    places: &Places,
) -> (Vec<Option<Vec<usize>>>, Option<String>) {
    let mine = share.ranks as usize;
    let total = (share.kernel_ranks.max(share.offset + share.ranks)) as usize;
    let unbound = (vec![None; mine], None);
    if places.cores.is_empty() {
        return match bind_to {
            Some(BindTo::None) | None => unbound,
            Some(_) => (
                vec![None; mine],
                Some("cannot read this process's CPU affinity; ranks are not bound".into()),
            ),
        };
    }
    // Which core each rank is placed on, and how many ranks the places hold one each.
    let (n, unit) = ppr.map_or((1, None), |(n, u)| (n.max(1) as usize, Some(u)));
    let groups = places.groups(unit.unwrap_or(PprUnit::Core));
    let core_of = |i: usize| -> usize {
        let g = &groups[(i / n) % groups.len()];
        g[(i % n) % g.len()]
    };
    let fits = match unit {
        None => total <= places.cores(),
        Some(PprUnit::Core) => total <= places.cores() * n,
        Some(_) => total <= groups.len() * n && groups.iter().all(|g| g.len() >= n),
    };
    let b = match bind_to {
        Some(BindTo::None) => return unbound,
        Some(b) => b,
        None if fits => BindTo::Core,
        None => return unbound,
    };
    let range = share.offset as usize..share.offset as usize + mine;
    if unit.is_none() {
        let ps = places.places_of(b);
        let out = range
            .map(|i| Some(places.cpus_of(&ps[i % ps.len()])))
            .collect();
        return (out, crowded(b, total, ps.len(), 1));
    }
    let out = range.map(|i| Some(places.widen(core_of(i), b))).collect();
    let cap = match unit {
        Some(PprUnit::Core) => places.cores(),
        _ => groups.len(),
    };
    let warn = if fits {
        None
    } else {
        crowded(b, total, cap, n)
    };
    (out, warn)
}

fn crowded(b: BindTo, total: usize, places: usize, per: usize) -> Option<String> {
    let what = match b {
        BindTo::Numa => "NUMA node",
        BindTo::Socket => "socket",
        BindTo::Core | BindTo::None => "core",
    };
    (total > places * per).then(|| {
        format!(
            "{total} ranks on {places} usable places: --bind-to {what} puts several ranks on one {what} (they wrap around); \
             use --bind-to none to let the OS spread them"
        )
    })
}

/// Host `h`'s share of its kernel's ranks: `boot_ids[h]` names each host's kernel (empty:
/// unknown, alone), `ranks[h]` its rank count.
pub fn share_of(h: usize, boot_ids: &[String], ranks: &[u32]) -> Share {
    let same = |o: usize| !boot_ids[h].is_empty() && boot_ids[o] == boot_ids[h];
    let offset = (0..h).filter(|&o| same(o)).map(|o| ranks[o]).sum();
    let kernel_ranks = (0..boot_ids.len())
        .filter(|&o| o == h || same(o))
        .map(|o| ranks[o])
        .sum();
    Share {
        offset,
        ranks: ranks[h],
        kernel_ranks,
    }
}

/// This machine's boot id (empty when unreadable).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This machine's model, or an empty one (every allowed CPU its own core) when unreadable.
pub fn this_machine() -> Topology {
    rcomm_runtime::topo::detect()
        .unwrap_or_else(|_| Topology::new(rcomm_runtime::topo::Source::Manual, String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcomm_runtime::topo::{Source, testkit};

    fn all(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    fn server_plan(
        bind: Option<BindTo>,
        ppr: Option<(u32, PprUnit)>,
        ranks: u32,
    ) -> Vec<Option<Vec<usize>>> {
        let p = Places::new(&all(32), &testkit::server2s());
        plan(bind, ppr, Share::alone(ranks), &p).0
    }

    fn cpus(v: &[usize]) -> Option<Vec<usize>> {
        Some(v.to_vec())
    }

    #[test]
    fn two_socket_server_places() {
        let p = Places::new(&all(32), &testkit::server2s());
        assert_eq!((p.cores(), p.numas(), p.packages()), (16, 2, 2));
        // Only some CPUs allowed: hyperthreads of one core stay together.
        let p = Places::new(&[0, 1, 16, 17, 9], &testkit::server2s());
        assert_eq!((p.cores(), p.numas(), p.packages()), (3, 2, 2));
        assert_eq!(p.cores[0].cpus, [0, 16]);
    }

    #[test]
    fn two_socket_server_binding_plans() {
        let node0: Vec<usize> = (0..8).chain(16..24).collect();
        let node1: Vec<usize> = (8..16).chain(24..32).collect();
        // By core, in Open MPI's order: the first cores of socket 0.
        assert_eq!(
            server_plan(Some(BindTo::Core), None, 4),
            [
                cpus(&[0, 16]),
                cpus(&[1, 17]),
                cpus(&[2, 18]),
                cpus(&[3, 19])
            ]
        );
        assert_eq!(
            server_plan(None, None, 4),
            server_plan(Some(BindTo::Core), None, 4)
        );
        let by_node = [cpus(&node0), cpus(&node1), cpus(&node0), cpus(&node1)];
        assert_eq!(server_plan(Some(BindTo::Numa), None, 4), by_node);
        assert_eq!(server_plan(Some(BindTo::Socket), None, 4), by_node);
        // Oversubscribed: unbound by default.
        assert!(server_plan(None, None, 17).iter().all(Option::is_none));
        // ppr:2:numa: two ranks per node, each on a core of its own there.
        let numa2 = Some((2, PprUnit::Numa));
        assert_eq!(
            server_plan(None, numa2, 4),
            [
                cpus(&[0, 16]),
                cpus(&[1, 17]),
                cpus(&[8, 24]),
                cpus(&[9, 25])
            ]
        );
        assert_eq!(
            server_plan(Some(BindTo::Numa), numa2, 4),
            [cpus(&node0), cpus(&node0), cpus(&node1), cpus(&node1)]
        );
        assert_eq!(
            server_plan(None, Some((1, PprUnit::Socket)), 2),
            [cpus(&[0, 16]), cpus(&[8, 24])]
        );
        assert!(
            server_plan(Some(BindTo::None), numa2, 4)
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn default_binding_follows_open_mpi() {
        let flat = Topology::new(Source::Manual, "");
        let p = Places::new(&[0, 1], &flat);
        let (b, w) = plan(None, None, Share::alone(2), &p);
        assert_eq!(b, [cpus(&[0]), cpus(&[1])]);
        assert!(w.is_none());
        let (b, w) = plan(None, None, Share::alone(8), &p);
        assert!(b.iter().all(Option::is_none) && w.is_none());
        let (b, w) = plan(Some(BindTo::Core), None, Share::alone(3), &p);
        assert_eq!(b[2], cpus(&[0]));
        assert!(w.unwrap().contains("3 ranks on 2 usable places"));
        let (b, _) = plan(Some(BindTo::None), None, Share::alone(1), &p);
        assert_eq!(b, vec![None]);
        // ppr:2:core: ranks 0,1 on core 0, ranks 2,3 on core 1.
        let (b, w) = plan(None, Some((2, PprUnit::Core)), Share::alone(4), &p);
        assert_eq!(b, [cpus(&[0]), cpus(&[0]), cpus(&[1]), cpus(&[1])]);
        assert!(w.is_none());
        let (b, w) = plan(
            Some(BindTo::Core),
            None,
            Share::alone(1),
            &Places::default(),
        );
        assert_eq!(b, vec![None]);
        assert!(w.unwrap().contains("cannot read"));
    }

    #[test]
    fn hosts_on_one_kernel_do_not_stack_their_ranks() {
        let boot = ["k1", "k1", "k2", ""].map(String::from);
        let ranks = [1, 2, 1, 1];
        assert_eq!(
            share_of(1, &boot, &ranks),
            Share {
                offset: 1,
                ranks: 2,
                kernel_ranks: 3
            }
        );
        assert_eq!(share_of(2, &boot, &ranks), Share::alone(1));
        assert_eq!(share_of(3, &boot, &ranks), Share::alone(1));
        let p = Places::new(&[0, 1], &Topology::new(Source::Manual, ""));
        // Two fake hosts with one rank each on a 2-core kernel: cores 0 and 1.
        let two = ["k", "k"].map(String::from);
        let second = plan(None, None, share_of(1, &two, &[1, 1]), &p).0;
        assert_eq!(second, [cpus(&[1])]);
        // Three ranks over them: oversubscribed together, so unbound on both.
        assert_eq!(
            plan(None, None, share_of(0, &two, &[2, 1]), &p).0,
            [None, None]
        );
    }
}
