//! Building one process's transports, in the two steps every rank takes alike: bind the
//! listeners and publish their addresses in the rank's record, then — once every record is
//! known — choose the route to each peer ([`crate::net::select`]) and connect. The protocol
//! layer (`rcomm-core`) carries the records through its bootstrap and receives a [`Net`]; it
//! names no transport, so a new one plugs in here and in the selection function only.

use crate::auth::Secret;
use crate::config::Config;
use crate::error::TransportError;
use crate::local::LocalListener;
use crate::net::{self, Net, Route};
use crate::rlog;
use crate::shmnet::{LocalPeer, ShmConfig, ShmNet};
use crate::tcp::{TcpAcceptor, TcpConfig, TcpNet};
use crate::wire::{AddrRecord, EndpointAddr};

/// Why the transports could not be set up.
#[derive(Debug)]
pub enum SetupError {
    /// A listener could not be bound (the local channel's name, TCP's interface): the
    /// environment's fault, before any peer is involved.
    Listen(String),
    /// No transport reaches rank `to`.
    NoRoute {
        /// The peer.
        to: u32,
        /// What rules every transport out.
        why: String,
    },
    /// Binding or connecting failed; the error names the peer (its world rank) where one was
    /// involved.
    Transport(TransportError),
}

impl From<TransportError> for SetupError {
    fn from(e: TransportError) -> Self {
        SetupError::Transport(e)
    }
}

/// The transports of a process between binding and connecting: the listeners whose addresses
/// its record publishes.
pub struct Listening {
    rank: u32,
    size: u32,
    local: Option<LocalListener>,
    tcp: Option<TcpAcceptor>,
    /// The `ib` endpoint, QPs made for every peer (connected once the records are known).
    ib: Option<crate::ib::IbNet>,
    tcp_cfg: TcpConfig,
    secret: Secret,
}

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

impl Listening {
    /// Binds every transport's listener for rank `rank` of `size` (none in a world of one): the
    /// node-local channel, named by the job and the local rank, and the TCP listener on the
    /// interface of [`tcp_address`], and the `ib` endpoint where the settings and the machine
    /// call for one ([`crate::ib::setup::open_for_rank`]). Peers must prove knowledge of
    /// `secret`.
    pub fn bind(
        cfg: &Config,
        job_id: &str,
        (rank, size): (u32, u32),
        (local_rank, local_size): (u32, u32),
        secret: &Secret,
    ) -> Result<Self, SetupError> {
        let tcp_cfg = TcpConfig {
            streams: cfg.tcp_streams,
            user_timeout_ms: cfg.tcp_timeout_ms,
            ..TcpConfig::default()
        };
        let mut me = Listening {
            rank,
            size,
            local: None,
            tcp: None,
            ib: None,
            tcp_cfg,
            secret: secret.clone(),
        };
        if size > 1 {
            me.local = Some(
                LocalListener::bind(job_id, local_rank, secret.clone())
                    .map_err(|e| SetupError::Listen(format!("local channel: {e}")))?,
            );
            // The interface rule (RCOMM_SOCKET_IFNAME), not the address that reached the
            // launcher: that is loopback under a single-host launcher, which ranks in other
            // network namespaces or on other hosts cannot reach.
            let (ifname, ip) = tcp_address(cfg, local_rank).map_err(SetupError::Listen)?;
            let a = TcpAcceptor::bind(ip, rank, size, secret, &me.tcp_cfg)?;
            rlog!(Info, "NET", "TCP listener on {} ({ifname})", a.addr());
            me.tcp = Some(a);
            me.ib = crate::ib::setup::open_for_rank(cfg, local_rank, local_size, rank, size)
                .map_err(|why| SetupError::Listen(format!("RCOMM_TRANSPORT=ib: {why}")))?;
        }
        Ok(me)
    }

    /// The addresses this rank publishes in its record.
    pub fn endpoints(&self) -> Vec<EndpointAddr> {
        let mut v = Vec::new();
        if let Some(l) = &self.local {
            v.push(EndpointAddr::Local(l.name().to_string()));
        }
        if let Some(a) = &self.tcp {
            v.push(EndpointAddr::Tcp(a.addr().to_string()));
        }
        if let Some(i) = &self.ib {
            v.push(EndpointAddr::Other {
                kind: crate::ib::conn::ENDPOINT_KIND,
                data: i.blob().encode(),
            });
        }
        v
    }

    /// Chooses the route to every peer from both records and the shared settings, and
    /// connects: node peers over shared memory now (every one of them is waited for), TCP
    /// peers when first used. `records[r]` is rank r's record.
    pub fn connect(self, cfg: &Config, records: &[AddrRecord]) -> Result<Net, SetupError> {
        let rank = self.rank;
        assert_eq!(records.len(), self.size as usize, "one record per rank");
        let mine = &records[rank as usize];
        let mut routes = Vec::with_capacity(records.len());
        for (r, p) in records.iter().enumerate() {
            let route = net::select(mine, p, cfg.transport)
                .map_err(|why| SetupError::NoRoute { to: r as u32, why })?;
            rlog!(Info, "INIT", "rank {rank} -> rank {r}: {}", route.name());
            routes.push(route);
        }
        let local_peers: Vec<LocalPeer> = records
            .iter()
            .enumerate()
            .filter(|(r, _)| routes[*r] == Route::Shm)
            .map(|(r, p)| LocalPeer {
                rank: r as u32,
                pid: p.info.pid,
                name: p
                    .endpoints
                    .iter()
                    .find_map(|e| match e {
                        EndpointAddr::Local(n) => Some(n.clone()),
                        _ => None,
                    })
                    .unwrap_or_default(),
            })
            .collect();
        let shm_cfg = ShmConfig {
            cma: cfg.shm_cma,
            membarrier: cfg.shm_membarrier,
            ..ShmConfig::default()
        };
        let shm = match (&self.local, local_peers.is_empty()) {
            (Some(l), false) => Some(ShmNet::connect(
                rank,
                l,
                &local_peers,
                &self.secret,
                shm_cfg,
            )?),
            _ => None,
        };
        // Every node peer is connected: the local channel's name can go (drop).
        let tcp_addrs = records
            .iter()
            .map(|p| {
                p.endpoints.iter().find_map(|e| match e {
                    EndpointAddr::Tcp(a) => Some(a.clone()),
                    _ => None,
                })
            })
            .collect();
        // ib peers: every QP to RTS from the peer's blob, now (no round trip needed).
        let mut ib = self.ib;
        if let Some(ep) = &mut ib {
            for (r, p) in records.iter().enumerate() {
                if routes[r] != Route::Ib {
                    continue;
                }
                let blob = crate::ib::blob_of(p).ok_or_else(|| SetupError::NoRoute {
                    to: r as u32,
                    why: "its ib connection blob does not decode".into(),
                })?;
                ep.connect(r as u32, &blob)?;
            }
            if !routes.contains(&Route::Ib) {
                ib = None;
            }
        }
        let tcp = TcpNet::new(rank, self.tcp, tcp_addrs, self.tcp_cfg, self.secret);
        Ok(Net::build(rank, routes, shm, ib, tcp))
    }
}

/// The TCP listener's interface: `RCOMM_SOCKET_IFNAME`'s when set; else the network interface
/// the topology puts nearest this rank's GPU or NUMA node (rail-aligned, see
/// [`crate::topo::choose`]) when it is up with an IPv4 address here; else the default rule.
/// The topology only ever narrows the default, so a machine it cannot read, or a fake host
/// (network namespace) that lacks the chosen interface, behaves as before.
pub fn tcp_address(cfg: &Config, local_rank: u32) -> Result<(String, std::net::IpAddr), String> {
    use crate::ifaddr;
    if cfg.socket_ifname.is_none()
        && let Some((_, choice)) = crate::topo::choose::for_this_process(cfg, local_rank)
        && let Some(net) = choice.net
        && let Some(spec) = ifaddr::IfSpec::parse(&format!("={}", net.name))
        && let Ok(ifs) = ifaddr::interfaces()
        && let Ok(found) = ifaddr::choose(Some(&spec), &ifs)
    {
        return Ok(found);
    }
    ifaddr::local_address(cfg.socket_ifname.as_ref())
}
