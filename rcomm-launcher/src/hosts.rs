//! Hosts and mapping: `-H host1:2,host2:2`, `--hostfile FILE`, `--map-by …` — which rank runs
//! on which host, in Open MPI's words.
//!
//! Mapping only decides the host of each rank; binding within a host is decided on that host
//! (by the launcher for local ranks, by its daemon for remote ones), from that host's own CPUs.

use std::path::Path;

/// One host of the job and how many ranks it takes (`slots`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// The name as given (also what ssh is asked to reach, and how messages name the host).
    pub name: String,
    /// Ranks it takes under `--map-by slot|node`.
    pub slots: u32,
}

/// How ranks are placed on hosts (`--map-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapBy {
    /// Fill each host's slots, host after host (Open MPI's `slot`; `core`, `numa` and `socket`
    /// place the same way here, since a host's ranks are consecutive either way).
    Slot,
    /// One rank per host in turn, skipping full hosts.
    Node,
    /// `ppr:N:core|numa|socket`: N ranks per core, NUMA node or package of each host, host
    /// after host; slots are not consulted.
    Ppr(u32, PprUnit),
    /// `ppr:N:node`: N ranks on each host.
    PprNode(u32),
}

/// What `ppr:N:UNIT` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PprUnit {
    /// Cores (also `hwthread`: ranks are bound to whole cores).
    Core,
    /// NUMA nodes.
    Numa,
    /// Packages (`socket`, `package`).
    Socket,
}

impl PprUnit {
    /// The code the control channel carries (1 core, 2 numa, 3 socket; 0 is no ppr).
    pub fn code(self) -> u8 {
        match self {
            PprUnit::Core => 1,
            PprUnit::Numa => 2,
            PprUnit::Socket => 3,
        }
    }

    /// The unit of a control-channel code.
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(PprUnit::Core),
            2 => Some(PprUnit::Numa),
            3 => Some(PprUnit::Socket),
            _ => None,
        }
    }
}

/// What a host offers to `ppr` mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPlaces {
    /// Usable cores.
    pub cores: u32,
    /// NUMA nodes with usable cores.
    pub numas: u32,
    /// Packages with usable cores.
    pub packages: u32,
}

impl HostPlaces {
    fn count(&self, u: PprUnit) -> u32 {
        match u {
            PprUnit::Core => self.cores,
            PprUnit::Numa => self.numas,
            PprUnit::Socket => self.packages,
        }
        .max(1)
    }
}

impl MapBy {
    /// `ppr:N:UNIT` as (N, UNIT), for binding.
    pub fn ppr(self) -> Option<(u32, PprUnit)> {
        match self {
            MapBy::Ppr(k, u) => Some((k, u)),
            _ => None,
        }
    }
}

/// Parses `--map-by`.
pub fn parse_map_by(s: &str) -> Result<MapBy, String> {
    let s = s.trim().to_ascii_lowercase();
    // Open MPI modifiers (`:PE=2`, `:OVERSUBSCRIBE`) are not supported; say so instead of
    // silently ignoring them.
    match s.as_str() {
        "slot" | "core" | "numa" | "socket" | "hwthread" => return Ok(MapBy::Slot),
        "node" => return Ok(MapBy::Node),
        _ => {}
    }
    let parts: Vec<&str> = s.split(':').collect();
    if let ["ppr", n, unit] = parts.as_slice() {
        let n: u32 = n
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{s:?}: ppr:N:UNIT needs a positive N"))?;
        return match *unit {
            "core" | "hwthread" => Ok(MapBy::Ppr(n, PprUnit::Core)),
            "numa" => Ok(MapBy::Ppr(n, PprUnit::Numa)),
            "socket" | "package" => Ok(MapBy::Ppr(n, PprUnit::Socket)),
            "node" => Ok(MapBy::PprNode(n)),
            u => Err(format!(
                "{s:?}: unknown ppr unit {u:?} (core, numa, socket, node)"
            )),
        };
    }
    Err(format!(
        "{s:?} is not a mapping: slot, node, core, numa, socket or ppr:N:core|numa|socket|node"
    ))
}

fn add_host(hosts: &mut Vec<HostSpec>, name: &str, slots: u32) {
    // A host named twice gets the sum of its slots, as in Open MPI.
    match hosts.iter_mut().find(|h| h.name == name) {
        Some(h) => h.slots += slots,
        None => hosts.push(HostSpec {
            name: name.to_string(),
            slots,
        }),
    }
}

fn valid_host(name: &str) -> bool {
    // No leading '-' (ssh would read it as an option) and nothing a shell would interpret.
    !name.is_empty()
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._@[]:".contains(c))
}

/// Parses `-H` values (each a comma list of `host[:slots]`), adding to `hosts`.
pub fn parse_host_list(list: &str, hosts: &mut Vec<HostSpec>) -> Result<(), String> {
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, slots) = match item.rsplit_once(':') {
            Some((n, s)) if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() => (
                n,
                s.parse::<u32>()
                    .map_err(|_| format!("-H {item}: {s:?} is not a number of slots"))?,
            ),
            _ => (item, 1),
        };
        if !valid_host(name) || slots == 0 {
            return Err(format!(
                "-H {item}: expected HOST or HOST:SLOTS with SLOTS ≥ 1"
            ));
        }
        add_host(hosts, name, slots);
    }
    Ok(())
}

/// Parses a hostfile: `host [slots=N] [max_slots=M]` per line, `#` comments, blank lines.
pub fn parse_hostfile(text: &str, file: &Path, hosts: &mut Vec<HostSpec>) -> Result<(), String> {
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", file.display(), i + 1);
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default();
        if !valid_host(name) {
            return Err(format!("{}: {name:?} is not a host name", at()));
        }
        let mut slots = 1;
        for w in words {
            match w.split_once('=') {
                Some(("slots", v)) => {
                    slots =
                        v.parse::<u32>().ok().filter(|&s| s > 0).ok_or_else(|| {
                            format!("{}: slots={v}: expected a positive number", at())
                        })?
                }
                // Open MPI's upper limit for oversubscription; rcomm never oversubscribes a host
                // beyond its slots, so the limit adds nothing.
                Some(("max_slots", _)) => {}
                _ => {
                    return Err(format!(
                        "{}: {w:?}: expected slots=N (lines read `host slots=N`)",
                        at()
                    ));
                }
            }
        }
        add_host(hosts, name, slots);
    }
    Ok(())
}

/// True for names that mean "this machine": `localhost` and this host's own name.
pub fn is_local(name: &str, my_hostname: &str) -> bool {
    name == "localhost" || name == "127.0.0.1" || name == my_hostname
}

/// How many ranks each host takes under `map`; `places[h]` is what host h offers.
pub fn capacities(hosts: &[HostSpec], map: MapBy, places: &[HostPlaces]) -> Vec<u32> {
    hosts
        .iter()
        .enumerate()
        .map(|(h, spec)| match map {
            MapBy::Slot | MapBy::Node => spec.slots,
            MapBy::Ppr(k, u) => k.saturating_mul(places.get(h).map_or(1, |p| p.count(u))),
            MapBy::PprNode(k) => k,
        })
        .collect()
}

/// The host of each rank. `places[h]` is what host h offers (used by `ppr`).
pub fn map_ranks(
    hosts: &[HostSpec],
    n: u32,
    map: MapBy,
    places: &[HostPlaces],
) -> Result<Vec<usize>, String> {
    let cap = capacities(hosts, map, places);
    let total: u64 = cap.iter().map(|&c| c as u64).sum();
    if n as u64 > total {
        let what = match map {
            MapBy::Slot | MapBy::Node => "slots",
            _ => "places under --map-by ppr",
        };
        return Err(format!(
            "{n} ranks requested but the {} host{} offer only {total} {what} ({}); lower -n or add slots (-H host:SLOTS, or slots=N in the hostfile)",
            hosts.len(),
            if hosts.len() == 1 { "" } else { "s" },
            hosts
                .iter()
                .zip(&cap)
                .map(|(h, c)| format!("{}:{c}", h.name))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    let mut out = Vec::with_capacity(n as usize);
    match map {
        MapBy::Node => {
            let mut used = vec![0u32; hosts.len()];
            while out.len() < n as usize {
                for h in 0..hosts.len() {
                    if out.len() < n as usize && used[h] < cap[h] {
                        used[h] += 1;
                        out.push(h);
                    }
                }
            }
        }
        _ => {
            for (h, &c) in cap.iter().enumerate() {
                for _ in 0..c {
                    if out.len() < n as usize {
                        out.push(h);
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(s: &str) -> Vec<HostSpec> {
        let mut h = Vec::new();
        parse_host_list(s, &mut h).unwrap();
        h
    }

    #[test]
    fn host_lists_and_hostfiles() {
        assert_eq!(
            hosts("a:2,b,a:1"),
            vec![
                HostSpec {
                    name: "a".into(),
                    slots: 3
                },
                HostSpec {
                    name: "b".into(),
                    slots: 1
                }
            ]
        );
        let mut h = Vec::new();
        assert!(parse_host_list("a:0", &mut h).is_err());
        assert!(parse_host_list("-oProxyCommand=x", &mut h).is_err());
        let mut h = Vec::new();
        parse_hostfile(
            "# cluster\nn1 slots=4\n\n  n2 slots=2 max_slots=8 # gpu\nn3\n",
            Path::new("hf"),
            &mut h,
        )
        .unwrap();
        assert_eq!(
            h.iter()
                .map(|x| (x.name.as_str(), x.slots))
                .collect::<Vec<_>>(),
            [("n1", 4), ("n2", 2), ("n3", 1)]
        );
        let e = parse_hostfile("n1 cpus=3\n", Path::new("hf"), &mut h).unwrap_err();
        assert!(e.contains("hf:1") && e.contains("slots=N"), "{e}");
    }

    fn cores(c: &[u32]) -> Vec<HostPlaces> {
        c.iter()
            .map(|&cores| HostPlaces {
                cores,
                numas: 2,
                packages: 1,
            })
            .collect()
    }

    #[test]
    fn map_by_slot_node_and_ppr() {
        let h = hosts("a:2,b:2,c:2");
        assert_eq!(
            map_ranks(&h, 6, MapBy::Slot, &[]).unwrap(),
            [0, 0, 1, 1, 2, 2]
        );
        assert_eq!(map_ranks(&h, 3, MapBy::Slot, &[]).unwrap(), [0, 0, 1]);
        assert_eq!(map_ranks(&h, 5, MapBy::Node, &[]).unwrap(), [0, 1, 2, 0, 1]);
        assert_eq!(
            map_ranks(&h, 6, MapBy::Ppr(1, PprUnit::Core), &cores(&[2, 1, 4])).unwrap(),
            [0, 0, 1, 2, 2, 2]
        );
        assert_eq!(
            map_ranks(&h, 4, MapBy::PprNode(2), &cores(&[1, 1, 1])).unwrap(),
            [0, 0, 1, 1]
        );
        let e = map_ranks(&h, 7, MapBy::Slot, &[]).unwrap_err();
        assert!(
            e.contains("only 6 slots") && e.contains("a:2,b:2,c:2"),
            "{e}"
        );
        // ppr:N:numa and ppr:N:socket count each host's NUMA nodes and packages.
        let p = cores(&[8, 8, 8]);
        assert_eq!(
            map_ranks(&h, 6, MapBy::Ppr(2, PprUnit::Numa), &p).unwrap(),
            [0, 0, 0, 0, 1, 1]
        );
        assert!(map_ranks(&h, 4, MapBy::Ppr(1, PprUnit::Socket), &p).is_err());
        assert_eq!(parse_map_by("ppr:2:core"), Ok(MapBy::Ppr(2, PprUnit::Core)));
        assert_eq!(
            parse_map_by("ppr:1:socket"),
            Ok(MapBy::Ppr(1, PprUnit::Socket))
        );
        assert_eq!(parse_map_by("ppr:2:numa"), Ok(MapBy::Ppr(2, PprUnit::Numa)));
        assert_eq!(parse_map_by("ppr:3:node"), Ok(MapBy::PprNode(3)));
        assert_eq!(parse_map_by("socket"), Ok(MapBy::Slot));
        assert!(parse_map_by("ppr:0:core").is_err() && parse_map_by("board").is_err());
    }
}
