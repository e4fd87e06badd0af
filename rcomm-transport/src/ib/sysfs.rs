//! HCA discovery from `/sys/class/infiniband`, under a root that tests point at fixture trees
//! (`rcomm-transport/tests/fixtures/ib/`).
//!
//! Per device: the node GUID and, per port, `state`, `phys_state`, `link_layer`, `rate`, `lid`
//! and the GID table (`gids/K`, typed by `gid_attrs/types/K`, tied to a network device by
//! `gid_attrs/ndevs/K`). sysfs has no MTU file for a port: on RoCE the active MTU follows from
//! the network device's MTU (as the kernel derives it); on InfiniBand it is known only from
//! `ibv_query_port`, so it is `None` here. A machine without the class directory has no RDMA
//! devices: an empty list, not an error. A file that exists but does not parse is an error
//! naming it.

use super::verbs::{GidEntry, GidType, LinkLayer, LinkSpeed, Mtu, PortState};
use rcomm_runtime::topo::TopoError;
use std::path::{Path, PathBuf};

/// One port as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (from 1).
    pub num: u8,
    /// Logical state.
    pub state: PortState,
    /// Physical state as sysfs names it (`LinkUp`, `Disabled`, `Polling`).
    pub phys_state: String,
    /// IB or Ethernet (RoCE).
    pub link_layer: LinkLayer,
    /// `rate` as printed (`200 Gb/sec (4X HDR)`).
    pub rate: String,
    /// The rate in Mb/s, when `rate` parses.
    pub rate_mbps: Option<u64>,
    /// Lanes and lane speed, when `rate` names them.
    pub width: Option<u8>,
    /// Lane speed, when named (SDR is printed without a name).
    pub speed: Option<LinkSpeed>,
    /// LID (0 on Ethernet).
    pub lid: u16,
    /// Active MTU on RoCE (from the network device); `None` on IB (see the module notes).
    pub active_mtu: Option<Mtu>,
    /// The non-empty GID table entries.
    pub gids: Vec<GidEntry>,
}

impl PortInfo {
    /// The GID index rcomm uses when `RCOMM_IB_GID_INDEX` is unset ([`super::gid_index_auto`]).
    pub fn gid_index_auto(&self) -> Option<u16> {
        super::gid_index_auto(self.link_layer, &self.gids)
    }
}

/// One HCA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaInfo {
    /// Kernel name (`mlx5_0`).
    pub name: String,
    /// Node GUID, if readable.
    pub node_guid: Option<u64>,
    /// Its ports, by number.
    pub ports: Vec<PortInfo>,
}

/// Where the devices are listed, under the root.
pub const CLASS_DIR: &str = "sys/class/infiniband";

/// The HCAs of the machine whose file system is at `root` (`/` for this one), by name.
pub fn discover(root: &Path) -> Result<Vec<HcaInfo>, TopoError> {
    let r = Reader::new(root);
    let mut out = Vec::new();
    for name in r.names(CLASS_DIR)? {
        let dev = Path::new(CLASS_DIR).join(&name);
        let node_guid = match r.read(dev.join("node_guid"))? {
            None => None,
            Some(s) => Some(parse_guid(&s).ok_or_else(|| {
                r.bad(dev.join("node_guid"), "a GUID like 0c42:a103:0065:1234", &s)
            })?),
        };
        let mut nums: Vec<u8> = Vec::new();
        for p in r.names(dev.join("ports"))? {
            nums.push(
                p.parse()
                    .map_err(|_| r.bad(dev.join("ports"), "numbered ports", &p))?,
            );
        }
        nums.sort_unstable();
        let mut ports = Vec::new();
        for n in nums {
            ports.push(port(&r, root, &dev.join("ports").join(n.to_string()), n)?);
        }
        out.push(HcaInfo {
            name,
            node_guid,
            ports,
        });
    }
    Ok(out)
}

fn port(r: &Reader, root: &Path, p: &Path, num: u8) -> Result<PortInfo, TopoError> {
    let need = |f: &str| r.need(p.join(f));
    let s = need("state")?;
    let state = s
        .split(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .and_then(PortState::from_num)
        .ok_or_else(|| r.bad(p.join("state"), "a state like `4: ACTIVE`", &s))?;
    let phys = r.read(p.join("phys_state"))?.unwrap_or_default();
    let phys_state = phys
        .split_once(':')
        .map_or(phys.trim(), |(_, n)| n.trim())
        .to_string();
    let ll = need("link_layer")?;
    let Some(link_layer) = LinkLayer::from_name(ll.trim()) else {
        return Err(r.bad(p.join("link_layer"), "InfiniBand or Ethernet", &ll));
    };
    let rate = r
        .read(p.join("rate"))?
        .unwrap_or_default()
        .trim()
        .to_string();
    let (rate_mbps, width, speed) = parse_rate(&rate);
    let lid = match r.read(p.join("lid"))? {
        None => 0,
        Some(s) => s
            .trim()
            .strip_prefix("0x")
            .and_then(|h| u16::from_str_radix(h, 16).ok())
            .ok_or_else(|| r.bad(p.join("lid"), "a LID like 0x5", &s))?,
    };
    let mut idx: Vec<u16> = Vec::new();
    for k in r.names(p.join("gids"))? {
        idx.push(
            k.parse()
                .map_err(|_| r.bad(p.join("gids"), "numbered GIDs", &k))?,
        );
    }
    idx.sort_unstable();
    let mut gids = Vec::new();
    let mut active_mtu = None;
    for index in idx {
        let f = p.join("gids").join(index.to_string());
        let s = r.need(&f)?;
        let gid = super::Gid::parse(&s).ok_or_else(|| r.bad(&f, "a GID like fe80:0000:…", &s))?;
        if gid.is_zero() {
            continue;
        }
        // The kernel refuses to read the type of an unused entry; a used one always has it.
        let tf = p.join("gid_attrs/types").join(index.to_string());
        let gid_type = match r.read(&tf).ok().flatten().as_deref().map(str::trim) {
            None => GidType::IbRoceV1,
            Some(t) => match GidType::from_name(t) {
                Some(g) => g,
                None => return Err(r.bad(&tf, "`IB/RoCE v1` or `RoCE v2`", t)),
            },
        };
        let ndev = r
            .read(p.join("gid_attrs/ndevs").join(index.to_string()))
            .ok()
            .flatten()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        if link_layer == LinkLayer::Ethernet
            && active_mtu.is_none()
            && let Some(nd) = &ndev
        {
            let mtu = Reader::new(root).read(Path::new("sys/class/net").join(nd).join("mtu"))?;
            active_mtu = mtu
                .and_then(|m| m.trim().parse().ok())
                .and_then(Mtu::for_ethernet);
        }
        gids.push(GidEntry {
            index,
            gid,
            gid_type,
            ndev,
        });
    }
    Ok(PortInfo {
        num,
        state,
        phys_state,
        link_layer,
        rate,
        rate_mbps,
        width,
        speed,
        lid,
        active_mtu,
        gids,
    })
}

/// `0c42:a103:0065:1234` → the 64-bit GUID.
fn parse_guid(s: &str) -> Option<u64> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 4 || groups.iter().any(|g| g.len() != 4) {
        return None;
    }
    u64::from_str_radix(&groups.concat(), 16).ok()
}

/// `200 Gb/sec (4X HDR)` → (200000 Mb/s, 4 lanes, HDR); `2.5 Gb/sec (1X)` names no speed.
fn parse_rate(s: &str) -> (Option<u64>, Option<u8>, Option<LinkSpeed>) {
    let Some((num, rest)) = s.split_once(" Gb/sec") else {
        return (None, None, None);
    };
    let mbps = num
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| (x * 1000.0).round() as u64);
    let inner = rest.trim().trim_start_matches('(').trim_end_matches(')');
    let mut it = inner.split_whitespace();
    let width = it
        .next()
        .and_then(|w| w.strip_suffix('X'))
        .and_then(|w| w.parse().ok());
    let speed = it.next().and_then(LinkSpeed::from_name);
    (mbps, width, speed)
}

/// Files under the root; every path is checked to stay inside it once links are followed.
struct Reader {
    root: PathBuf,
    canon: Option<PathBuf>,
}

/// Largest file read (real ones are a line).
const MAX_FILE: u64 = 1 << 16;

impl Reader {
    fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            canon: std::fs::canonicalize(root).ok(),
        }
    }

    /// The real path of `rel`, refused if a link leads out of the root; `None` if missing.
    fn real(&self, rel: &Path) -> Result<Option<PathBuf>, TopoError> {
        let path = self.root.join(rel);
        let real = match std::fs::canonicalize(&path) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(TopoError::Io { path, source }),
        };
        match &self.canon {
            Some(c) if real.starts_with(c) => Ok(Some(real)),
            _ => Err(TopoError::Escape {
                path,
                root: self.root.clone(),
            }),
        }
    }

    fn read(&self, rel: impl AsRef<Path>) -> Result<Option<String>, TopoError> {
        use std::io::Read;
        let Some(real) = self.real(rel.as_ref())? else {
            return Ok(None);
        };
        let mut s = String::new();
        std::fs::File::open(&real)
            .and_then(|f| f.take(MAX_FILE).read_to_string(&mut s))
            .map_err(|source| TopoError::Io {
                path: self.root.join(rel.as_ref()),
                source,
            })?;
        Ok(Some(s))
    }

    fn need(&self, rel: impl AsRef<Path>) -> Result<String, TopoError> {
        let rel = rel.as_ref();
        self.read(rel)?.ok_or_else(|| TopoError::Io {
            path: self.root.join(rel),
            source: std::io::ErrorKind::NotFound.into(),
        })
    }

    fn names(&self, rel: impl AsRef<Path>) -> Result<Vec<String>, TopoError> {
        let Some(real) = self.real(rel.as_ref())? else {
            return Ok(Vec::new());
        };
        let path = self.root.join(rel.as_ref());
        let io = |source| TopoError::Io {
            path: path.clone(),
            source,
        };
        let mut v = Vec::new();
        for e in std::fs::read_dir(&real).map_err(io)? {
            if let Some(n) = e.map_err(io)?.file_name().to_str() {
                v.push(n.to_string());
            }
        }
        v.sort();
        Ok(v)
    }

    fn bad(&self, rel: impl AsRef<Path>, what: &str, text: &str) -> TopoError {
        let shown: String = text.trim().chars().take(40).collect();
        TopoError::Parse {
            path: self.root.join(rel.as_ref()),
            why: format!("expected {what}, found {shown:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ib/node")
    }

    #[test]
    fn the_fixture_node_has_an_hdr_hca_a_roce_v2_hca_and_a_port_down() {
        let h = discover(&fixture()).unwrap();
        let names: Vec<&str> = h.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2"]);
        // mlx5_0: InfiniBand HDR, reached through the class directory's symbolic link.
        let p = &h[0].ports[0];
        assert_eq!(h[0].node_guid, Some(0x0c42_a103_0065_1234));
        assert_eq!(
            (p.num, p.state, p.phys_state.as_str()),
            (1, PortState::Active, "LinkUp")
        );
        assert_eq!(
            (p.link_layer, p.lid, p.active_mtu),
            (LinkLayer::InfiniBand, 5, None)
        );
        assert_eq!(
            (p.rate_mbps, p.width, p.speed),
            (Some(200_000), Some(4), Some(LinkSpeed::Hdr))
        );
        assert_eq!(p.gids.len(), 1, "empty entries are left out");
        assert_eq!(
            p.gids[0].gid.to_string(),
            "fe80:0000:0000:0000:0c42:a103:0065:1234"
        );
        assert_eq!(p.gid_index_auto(), Some(0));
        // mlx5_1: RoCE with the mlx5 table layout; auto picks the IPv4 RoCE v2 entry.
        let p = &h[1].ports[0];
        assert_eq!(
            (p.link_layer, p.state, p.lid),
            (LinkLayer::Ethernet, PortState::Active, 0)
        );
        assert_eq!(p.gids.len(), 4);
        assert_eq!(
            p.gids[3].gid.ipv4(),
            Some(std::net::Ipv4Addr::new(10, 0, 0, 7))
        );
        assert_eq!(p.gids[3].gid_type, GidType::RoceV2);
        assert_eq!(p.gids[2].gid_type, GidType::IbRoceV1);
        assert_eq!(p.gids[3].ndev.as_deref(), Some("ens1f0"));
        assert_eq!(p.gid_index_auto(), Some(3));
        // ens1f0 has MTU 9000: RoCE's 4096.
        assert_eq!(p.active_mtu, Some(Mtu::M4096));
        assert_eq!(
            (p.rate_mbps, p.speed),
            (Some(100_000), Some(LinkSpeed::Edr))
        );
        // mlx5_2: its port is down and disabled.
        let p = &h[2].ports[0];
        assert_eq!(
            (p.state, p.phys_state.as_str()),
            (PortState::Down, "Disabled")
        );
    }

    #[test]
    fn no_class_directory_is_no_devices_and_bad_files_name_themselves() {
        let none = fixture().join("sys/class/net");
        assert_eq!(discover(&none).unwrap(), []);
        assert_eq!(discover(Path::new("/nonexistent-root")).unwrap(), []);
        let d = std::env::temp_dir().join(format!("rcomm-ib-sysfs-{}", std::process::id()));
        let port = d.join(CLASS_DIR).join("mlx5_9/ports/1");
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(port.join("link_layer"), "Fibre\n").unwrap();
        let e = discover(&d).unwrap_err().to_string();
        assert!(
            e.contains("mlx5_9/ports/1/link_layer") && e.contains("Fibre"),
            "{e}"
        );
        // A link out of the root is refused, not followed.
        std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", port.join("gids/0")).unwrap();
        let e = discover(&d).unwrap_err();
        assert!(matches!(e, TopoError::Escape { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn rates_and_guids_parse() {
        assert_eq!(parse_rate("2.5 Gb/sec (1X)"), (Some(2_500), Some(1), None));
        assert_eq!(
            parse_rate("400 Gb/sec (4X NDR)"),
            (Some(400_000), Some(4), Some(LinkSpeed::Ndr))
        );
        assert_eq!(parse_rate("fast"), (None, None, None));
        assert_eq!(parse_guid("0000:0000:0000:0001"), Some(1));
        assert_eq!(parse_guid("1:2"), None);
    }
}
