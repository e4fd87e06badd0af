//! Building one process's transports, in the two steps every rank takes alike: every
//! transport of the table listens and publishes its address in the rank's record, then — once
//! every record is known — the route to each peer is chosen ([`crate::net::select`]) and every
//! transport connects to the peers it serves. The protocol layer (`rcomm-core`) carries the
//! records through its bootstrap and receives a [`Net`]; it names no transport, and this file
//! names none either: it loops over [`TABLE`].

use crate::caps::Features;
use crate::error::TransportError;
use crate::net::{Net, Route, select};
use crate::table::{Listener, TABLE};
use crate::transport::{ConnectCx, ListenCx, ListenError};
use rcomm_runtime::auth::Secret;
use rcomm_runtime::config::Config;
use rcomm_runtime::rlog;
use rcomm_runtime::wire::{AddrRecord, EndpointAddr};

pub use crate::tcp::tcp_address;

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

impl From<ListenError> for SetupError {
    fn from(e: ListenError) -> Self {
        match e {
            ListenError::Env(why) => SetupError::Listen(why),
            ListenError::Transport(e) => SetupError::Transport(e),
        }
    }
}

/// The transports of a process between binding and connecting: what each one's `listen` left,
/// by row of the table.
pub struct Listening {
    rank: u32,
    size: u32,
    listeners: Vec<Option<Listener>>,
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
    /// Lets every transport of the table listen for rank `rank` of `size` (none does in a
    /// world of one): the node-local channel, named by the job and the local rank, the TCP
    /// listener, the `ib` endpoint where the settings and the machine call for one. Peers must
    /// prove knowledge of `secret`.
    pub fn bind(
        cfg: &Config,
        job_id: &str,
        (rank, size): (u32, u32),
        (local_rank, local_size): (u32, u32),
        secret: &Secret,
    ) -> Result<Self, SetupError> {
        let cx = ListenCx {
            cfg,
            job_id,
            rank,
            size,
            local_rank,
            local_size,
            secret,
        };
        let mut listeners = Vec::with_capacity(TABLE.len());
        for d in TABLE {
            listeners.push(if size > 1 { (d.listen)(&cx)? } else { None });
        }
        Ok(Listening {
            rank,
            size,
            listeners,
            secret: secret.clone(),
        })
    }

    /// The addresses this rank publishes in its record.
    pub fn endpoints(&self) -> Vec<EndpointAddr> {
        TABLE
            .iter()
            .zip(&self.listeners)
            .filter_map(|(d, l)| (d.address)(l.as_ref()?))
            .collect()
    }

    /// Chooses the route to every peer from both records and the shared settings, and lets
    /// every transport connect to the peers it serves: those it is the route of, or, for a
    /// bulk-only lane (no messages), those it reaches beside a node-local route. `records[r]`
    /// is rank r's record.
    pub fn connect(self, cfg: &Config, records: &[AddrRecord]) -> Result<Net, SetupError> {
        let rank = self.rank;
        assert_eq!(records.len(), self.size as usize, "one record per rank");
        let mine = &records[rank as usize];
        let mut routes = Vec::with_capacity(records.len());
        for (r, p) in records.iter().enumerate() {
            let route = select(mine, p, cfg.transport)
                .map_err(|why| SetupError::NoRoute { to: r as u32, why })?;
            rlog!(Info, "INIT", "rank {rank} -> rank {r}: {}", route.name());
            routes.push(route);
        }
        let node_local = |r: usize| {
            routes[r]
                .row()
                .is_some_and(|d| d.features.contains(Features::NODE_LOCAL))
        };
        let mut eps = Vec::new();
        let mut dev_reach = vec![false; records.len()];
        for ((i, d), l) in TABLE.iter().enumerate().zip(self.listeners) {
            let reach: Vec<bool> = (0..records.len())
                .map(|r| {
                    if d.carries_messages() {
                        routes[r] == Route::of_row(i)
                    } else {
                        r != rank as usize && node_local(r) && (d.can_connect)(mine, &records[r])
                    }
                })
                .collect();
            let cx = ConnectCx {
                cfg,
                rank,
                records,
                reach: &reach,
                secret: &self.secret,
            };
            if let Some(e) = (d.connect)(l, &cx)? {
                if !d.carries_messages() {
                    dev_reach = reach;
                }
                eps.push(e);
            }
        }
        Ok(Net::new(rank, routes, eps, dev_reach))
    }
}
