//! Who a rank is, and whether two ranks share a node.
//!
//! Same node ⇔ same hostname, boot id and network namespace. A hostname alone is not enough:
//! fake hosts made of network namespaces share `/dev/shm`, PIDs and the boot id, yet cannot
//! reach each other's abstract Unix sockets; and two real hosts can share a hostname by mistake.

use std::os::unix::fs::MetadataExt;

/// One rank's identity, published in its address record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Node name (UTS namespace).
    pub hostname: String,
    /// `/proc/sys/kernel/random/boot_id`: tells apart hosts that happen to share a name.
    pub boot_id: String,
    /// Inode of `/proc/self/ns/net`.
    pub netns: u64,
    /// User id (single copy between processes needs the same user).
    pub uid: u32,
    /// Process id (for messages, and for single copy on one node).
    pub pid: u32,
    /// rcomm library version.
    pub version: String,
    /// Protocol-relevant settings, (name, value), which must agree on every rank.
    pub settings: Vec<(String, String)>,
}

/// Ranks that disagree on a protocol-relevant setting.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error(
    "settings differ between ranks: {name} is {} — set it the same on every rank (e.g. rcomm-run -x {name}=...)",
    .groups.iter().map(|(v, r)| format!("{v:?} on rank{} {}", if r.len() > 1 { "s" } else { "" }, rank_list(r))).collect::<Vec<_>>().join(" but ")
)]
pub struct SettingsMismatch {
    /// The variable.
    pub name: String,
    /// Each distinct value with the ranks holding it, first group containing rank 0.
    pub groups: Vec<(String, Vec<u32>)>,
}

/// "0-3,5,7" style list.
pub fn rank_list(r: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < r.len() {
        let mut j = i;
        while j + 1 < r.len() && r[j + 1] == r[j] + 1 {
            j += 1;
        }
        out.push(if j > i + 1 {
            format!("{}-{}", r[i], r[j])
        } else if j == i + 1 {
            format!("{},{}", r[i], r[j])
        } else {
            r[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// The current node name.
pub fn hostname() -> String {
    crate::os::hostname()
}

impl PeerInfo {
    /// This process's identity with the given protocol-relevant settings.
    pub fn local(settings: Vec<(String, String)>) -> Self {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let netns = std::fs::metadata("/proc/self/ns/net")
            .map(|m| m.ino())
            .unwrap_or(0);
        Self {
            hostname: hostname(),
            boot_id,
            netns,
            uid: current_uid(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            settings,
        }
    }

    /// Whether `other` runs on the same node (shared memory and the local channel reach it).
    pub fn same_node(&self, other: &PeerInfo) -> bool {
        self.hostname == other.hostname
            && self.boot_id == other.boot_id
            && self.netns == other.netns
    }

    /// Whether `other` runs on the same kernel (so on the same CPUs), whatever splits node
    /// identity further: another network or UTS namespace, a container, or `RCOMM_HOSTID`
    /// (which init appends to the boot id after a `/`).
    pub fn same_kernel(&self, other: &PeerInfo) -> bool {
        let kernel = |b: &str| b.split('/').next().unwrap_or_default().to_string();
        kernel(&self.boot_id) == kernel(&other.boot_id)
    }

    /// A 64-bit FNV-1a hash of the settings: cheap to compare, and to log.
    pub fn settings_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (k, v) in &self.settings {
            for b in k.bytes().chain([0]).chain(v.bytes()).chain([0]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x100_0000_01b3);
            }
        }
        h
    }
}

/// The real uid, read from the owner of `/proc/self` (avoids an FFI call for a constant).
fn current_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

/// Checks that every rank has the same protocol-relevant settings; `infos[r]` belongs to rank r.
/// The error names the first differing variable and which ranks hold which value.
pub fn check_settings(infos: &[PeerInfo]) -> Result<(), SettingsMismatch> {
    let Some(first) = infos.first() else {
        return Ok(());
    };
    let h0 = first.settings_hash();
    if infos
        .iter()
        .all(|i| i.settings_hash() == h0 && i.settings == first.settings)
    {
        return Ok(());
    }
    let mut names: Vec<&str> = infos
        .iter()
        .flat_map(|i| i.settings.iter().map(|(k, _)| k.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        for (r, i) in infos.iter().enumerate() {
            let v = i
                .settings
                .iter()
                .find(|(k, _)| k == name)
                .map_or("<unset>".to_string(), |(_, v)| v.clone());
            match groups.iter_mut().find(|(g, _)| *g == v) {
                Some((_, ranks)) => ranks.push(r as u32),
                None => groups.push((v, vec![r as u32])),
            }
        }
        if groups.len() > 1 {
            return Err(SettingsMismatch {
                name: name.to_string(),
                groups,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(t: &str) -> PeerInfo {
        PeerInfo {
            settings: vec![("RCOMM_TRANSPORT".into(), t.into())],
            ..PeerInfo::local(vec![])
        }
    }

    #[test]
    fn same_node_needs_hostname_boot_id_and_netns() {
        let a = PeerInfo::local(vec![]);
        assert!(a.same_node(&a.clone()));
        assert!(!a.same_node(&PeerInfo {
            netns: a.netns + 1,
            ..a.clone()
        }));
        assert!(!a.same_node(&PeerInfo {
            hostname: "other".into(),
            ..a.clone()
        }));
        assert!(!a.same_node(&PeerInfo {
            boot_id: "x".into(),
            ..a.clone()
        }));
    }

    #[test]
    fn local_identity_is_filled_in() {
        let a = PeerInfo::local(vec![]);
        assert!(!a.hostname.is_empty() && a.boot_id.len() >= 32 && a.netns != 0);
        assert_eq!(a.pid, std::process::id());
    }

    #[test]
    fn mismatch_names_variable_and_ranks() {
        let infos = vec![info("auto"), info("auto"), info("tcp"), info("auto")];
        let e = check_settings(&infos).unwrap_err();
        assert_eq!(e.name, "RCOMM_TRANSPORT");
        assert_eq!(
            e.groups,
            vec![("auto".into(), vec![0, 1, 3]), ("tcp".into(), vec![2])]
        );
        let msg = e.to_string();
        assert!(
            msg.contains("\"tcp\" on rank 2") && msg.contains("ranks 0,1,3"),
            "{msg}"
        );
        assert!(check_settings(&[info("x"), info("x")]).is_ok());
    }

    #[test]
    fn rank_lists_compress_runs() {
        assert_eq!(rank_list(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7,8");
    }
}
