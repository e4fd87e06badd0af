//! Which network interface a rank's TCP listener (and the launcher's KVS) binds to:
//! `RCOMM_SOCKET_IFNAME`, with the same syntax as `NCCL_SOCKET_IFNAME`.
//!
//! * `eth,ens` — interfaces whose names **start with** one of the comma-separated prefixes;
//! * `^lo,docker` — every interface except those starting with one of them;
//! * `=eth0,ib0` / `^=eth0` — the same with **exact** names.
//!
//! Unset, the first non-loopback interface that is up and has an IPv4 address is used, and
//! loopback only when it is the only one (a single host without a network, where loopback is
//! the right answer). Candidates are taken in the order the kernel lists them (interface index),
//! so every run on one machine picks the same address. Only IPv4 is considered: the address
//! records and the tests speak IPv4, and a link-local IPv6 address would need a scope id to be
//! reachable at all.
//!
//! Why not the address that reaches the launcher (the old rule)? Under a single-host launcher
//! that is always `127.0.0.1`, which ranks in other network namespaces (or, with an SSH launcher,
//! on other hosts) cannot reach; and on a cluster the launcher's network (management Ethernet)
//! is often not the one data should use.

use std::ffi::CStr;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// A parsed `RCOMM_SOCKET_IFNAME` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfSpec {
    /// `^`: the names are exclusions.
    pub exclude: bool,
    /// `=`: the names are exact, not prefixes.
    pub exact: bool,
    /// The names or prefixes (never empty strings).
    pub names: Vec<String>,
}

impl IfSpec {
    /// Parses the variable's value; `None` for a value naming no interface at all (such as
    /// `^` or `,`), which the caller reports as an error.
    pub fn parse(v: &str) -> Option<Self> {
        let mut s = v.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        (!names.is_empty()).then_some(Self {
            exclude,
            exact,
            names,
        })
    }

    /// Whether interface `name` is allowed by this spec.
    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

impl fmt::Display for IfSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exclude {
            f.write_str("^")?;
        }
        if self.exact {
            f.write_str("=")?;
        }
        f.write_str(&self.names.join(","))
    }
}

/// One interface address as the system lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    /// Interface name.
    pub name: String,
    /// Its IPv4 address, if this entry has one.
    pub ipv4: Option<Ipv4Addr>,
    /// `IFF_UP`.
    pub up: bool,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
}

/// The interfaces of this network namespace (one entry per address, as `getifaddrs` lists them).
pub fn interfaces() -> std::io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`, which we free below exactly once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        let mut ipv4 = None;
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr of at least its family's size; we read
            // the family first and reinterpret only an AF_INET one as sockaddr_in.
            let fam = unsafe { (*ifa.ifa_addr).sa_family };
            if fam as i32 == libc::AF_INET {
                // SAFETY: see above; AF_INET means the storage is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                ipv4 = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
        }
        out.push(IfAddr {
            name,
            ipv4,
            up: flags & libc::IFF_UP as u32 != 0,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
        });
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Picks the address to bind to from `ifs` (see the module docs). The error names the variable
/// and lists the interfaces present, so a typo is obvious.
pub fn choose(spec: Option<&IfSpec>, ifs: &[IfAddr]) -> Result<(String, IpAddr), String> {
    let usable = |i: &&IfAddr| i.up && i.ipv4.is_some();
    let pick = |i: &IfAddr| (i.name.clone(), IpAddr::V4(i.ipv4.expect("usable")));
    match spec {
        Some(s) => ifs
            .iter()
            .filter(usable)
            .find(|i| s.matches(&i.name))
            .map(pick)
            .ok_or_else(|| {
                format!(
                    "RCOMM_SOCKET_IFNAME={s} matches no interface that is up with an IPv4 address; interfaces here: {}",
                    describe(ifs)
                )
            }),
        None => ifs
            .iter()
            .filter(usable)
            .find(|i| !i.loopback)
            .or_else(|| ifs.iter().filter(usable).find(|i| i.loopback))
            .map(pick)
            .ok_or_else(|| {
                format!(
                    "no interface is up with an IPv4 address (set RCOMM_SOCKET_IFNAME); interfaces here: {}",
                    describe(ifs)
                )
            }),
    }
}

/// `lo 127.0.0.1 up, eth0 down, ...`, one item per interface (its IPv4 addresses joined).
fn describe(ifs: &[IfAddr]) -> String {
    let mut items: Vec<(String, Vec<String>, bool)> = Vec::new();
    for i in ifs {
        let pos = match items.iter().position(|(n, _, _)| *n == i.name) {
            Some(p) => p,
            None => {
                items.push((i.name.clone(), Vec::new(), i.up));
                items.len() - 1
            }
        };
        if let Some(a) = i.ipv4 {
            items[pos].1.push(a.to_string());
        }
    }
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(|(n, a, up)| {
            let addrs = if a.is_empty() {
                "no IPv4".to_string()
            } else {
                a.join(" ")
            };
            format!("{n} ({addrs}, {})", if *up { "up" } else { "down" })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The address this process binds its TCP listener to under `spec`, with the interface's name.
pub fn local_address(spec: Option<&IfSpec>) -> Result<(String, IpAddr), String> {
    let ifs = interfaces().map_err(|e| format!("listing network interfaces (getifaddrs): {e}"))?;
    choose(spec, &ifs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifa(name: &str, ip: Option<[u8; 4]>, up: bool) -> IfAddr {
        IfAddr {
            name: name.into(),
            ipv4: ip.map(Ipv4Addr::from),
            up,
            loopback: name == "lo",
        }
    }

    fn table() -> Vec<IfAddr> {
        vec![
            ifa("lo", Some([127, 0, 0, 1]), true),
            ifa("eth0", None, true),
            ifa("eth0", Some([10, 0, 0, 1]), true),
            ifa("docker0", Some([172, 17, 0, 1]), true),
            ifa("ens5", Some([10, 1, 0, 1]), false),
            ifa("ens6", Some([10, 2, 0, 1]), true),
            ifa("ib0", Some([10, 3, 0, 1]), true),
        ]
    }

    fn pick(v: Option<&str>) -> Result<String, String> {
        let spec = v.map(|v| IfSpec::parse(v).expect("spec"));
        choose(spec.as_ref(), &table()).map(|(n, a)| format!("{n} {a}"))
    }

    #[test]
    fn ifname_spec_parses_prefixes_exclusions_and_exact_names() {
        let s = IfSpec::parse(" eth, ens ").unwrap();
        assert_eq!(
            (s.exclude, s.exact, s.names.clone()),
            (false, false, vec!["eth".into(), "ens".into()])
        );
        assert!(s.matches("eth0") && s.matches("ens5") && !s.matches("ib0"));
        let s = IfSpec::parse("^lo,docker").unwrap();
        assert!(s.exclude && !s.exact);
        assert!(!s.matches("lo") && !s.matches("docker0") && s.matches("eth0"));
        let s = IfSpec::parse("=eth0").unwrap();
        assert!(s.exact && s.matches("eth0") && !s.matches("eth01"));
        let s = IfSpec::parse("^=eth0").unwrap();
        assert!(s.exclude && s.exact && !s.matches("eth0") && s.matches("eth01"));
        assert_eq!(s.to_string(), "^=eth0");
        for bad in ["", "^", "=", "^=", " , ,"] {
            assert_eq!(IfSpec::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ifname_default_is_the_first_non_loopback_interface_up_with_ipv4() {
        // eth0's first entry has no IPv4 address; its second does. ens5 is down.
        assert_eq!(pick(None).unwrap(), "eth0 10.0.0.1");
        let only_lo = vec![
            ifa("lo", Some([127, 0, 0, 1]), true),
            ifa("eth0", Some([10, 0, 0, 1]), false),
        ];
        assert_eq!(choose(None, &only_lo).unwrap().1.to_string(), "127.0.0.1");
    }

    #[test]
    fn ifname_selection_honours_prefixes_exclusions_and_exact_names() {
        assert_eq!(pick(Some("ens")).unwrap(), "ens6 10.2.0.1", "ens5 is down");
        assert_eq!(
            pick(Some("ib,ens")).unwrap(),
            "ens6 10.2.0.1",
            "kernel order, not list order"
        );
        assert_eq!(pick(Some("^lo,eth")).unwrap(), "docker0 172.17.0.1");
        assert_eq!(pick(Some("=ib0")).unwrap(), "ib0 10.3.0.1");
        assert_eq!(
            pick(Some("lo")).unwrap(),
            "lo 127.0.0.1",
            "loopback when asked for"
        );
    }

    #[test]
    fn ifname_without_a_match_is_an_error_naming_the_variable_and_the_interfaces() {
        let e = pick(Some("=ib1")).unwrap_err();
        assert!(e.contains("RCOMM_SOCKET_IFNAME==ib1"), "{e}");
        for want in [
            "lo (127.0.0.1, up)",
            "eth0 (10.0.0.1, up)",
            "ens5 (10.1.0.1, down)",
            "ib0 (10.3.0.1, up)",
        ] {
            assert!(e.contains(want), "{want} missing: {e}");
        }
        let e = choose(None, &[ifa("eth0", None, true)]).unwrap_err();
        assert!(
            e.contains("RCOMM_SOCKET_IFNAME") && e.contains("eth0 (no IPv4, up)"),
            "{e}"
        );
    }

    #[test]
    fn ifname_lists_this_hosts_loopback() {
        let ifs = interfaces().unwrap();
        assert!(
            ifs.iter()
                .any(|i| i.loopback && i.ipv4 == Some(Ipv4Addr::LOCALHOST)),
            "{ifs:?}"
        );
        assert!(local_address(None).is_ok());
    }
}
