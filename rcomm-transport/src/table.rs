//! The transport table: every transport of this crate, once, in order of preference. One line
//! per transport makes its [`Descriptor`] (what setup loops over), its arm of [`Endpoint`] (the
//! static dispatch [`crate::net::Net`] calls per message) and of [`Route`]. Adding a transport
//! is its own module implementing [`Transport`] and a line here.

use crate::caps::{Caps, Features, Ops};
use crate::cuda_ep::CudaEndpoint;
use crate::error::TransportError;
use crate::ib::IbNet;
use crate::mem::{MemKind, MemRef, RKey};
use crate::shmnet::ShmNet;
#[cfg(feature = "sim")]
use crate::sim_ep::SimEndpoint;
use crate::tcp::TcpNet;
use crate::transport::{Counters, Deliver, Descriptor, Transport, Tx, publish};
use rcomm_runtime::config::TransportChoice;
use rcomm_runtime::os::PollSet;
use rcomm_runtime::wire::{AddrRecord, Header};

/// A row of [`TABLE`].
pub type Row = Descriptor<Listener, Endpoint>;

/// A transport that is a member of the table: reach its endpoint in an [`Endpoint`].
pub trait Member: Transport {
    /// Its route.
    const ROUTE: Route;
    /// The endpoint if it is this transport's.
    fn of(e: &Endpoint) -> Option<&Self>;
    /// The endpoint if it is this transport's.
    fn of_mut(e: &mut Endpoint) -> Option<&mut Self>;
}

// A row's doc comments, then the `cfg`s under which it exists (a test-only transport's
// feature): every item and arm the row makes carries them.
macro_rules! table {
    ($( $(#[doc = $doc:literal])* $(#[cfg($cfg:meta)])* $v:ident: $t:ty => $held:ty ),* $(,)?) => {
        /// How one peer is reached: this process, or a transport of the table.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Route {
            /// This process.
            SelfLoop,
            $( $(#[doc = $doc])* $(#[cfg($cfg)])* $v, )*
        }

        const ROUTES: &[Route] = &[$( $(#[cfg($cfg)])* Route::$v ),*];

        /// One transport of a process (static dispatch: a `match`, no `dyn`).
        #[derive(Debug)]
        pub enum Endpoint {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])* $v($held), )*
        }

        /// What a transport's `listen` left for its `connect`.
        // One per transport, made once at setup and moved only into `connect`: the size
        // difference (the `ib` endpoint is made at listen) is moot.
        #[allow(clippy::large_enum_variant)]
        pub enum Listener {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])* $v(<$t as Transport>::Listener), )*
        }

        /// Every transport, in order of preference: the first that reaches a peer (and that
        /// the settings allow) is its route.
        pub static TABLE: &[Row] = &[$(
            $(#[cfg($cfg)])*
            Descriptor {
                name: <$t as Transport>::NAME,
                ops: <$t as Transport>::OFFERS.0,
                kinds: <$t as Transport>::OFFERS.1,
                features: <$t as Transport>::OFFERS.2,
                windows: <$t as Transport>::WINDOWS,
                can_connect: <$t as Transport>::can_connect,
                refusal: <$t as Transport>::refusal,
                listen: |cx| Ok(<$t as Transport>::listen(cx)?.map(Listener::$v)),
                address: |l| match l {
                    Listener::$v(l) => <$t as Transport>::address(l)
                        .map(|b| publish(<$t as Transport>::ADDR_KIND, b)),
                    #[allow(unreachable_patterns)]
                    _ => None,
                },
                connect: |l, cx| {
                    let l = match l {
                        Some(Listener::$v(l)) => Some(l),
                        _ => None,
                    };
                    Ok(<$t as Transport>::connect(l, cx)?.map(|e| Endpoint::$v(e.into())))
                },
                window_create: <$t as Transport>::window_create,
                window_map: <$t as Transport>::window_map,
            },
        )*];

        $(
            $(#[cfg($cfg)])*
            impl Member for $t {
                const ROUTE: Route = Route::$v;
                fn of(e: &Endpoint) -> Option<&Self> {
                    match e {
                        Endpoint::$v(x) => Some(<$held as std::borrow::Borrow<$t>>::borrow(x)),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }
                fn of_mut(e: &mut Endpoint) -> Option<&mut Self> {
                    match e {
                        Endpoint::$v(x) => {
                            Some(<$held as std::borrow::BorrowMut<$t>>::borrow_mut(x))
                        }
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }
            }
        )*

        impl Route {
            /// Short name for logs and counters.
            pub fn name(self) -> &'static str {
                match self {
                    Route::SelfLoop => "self",
                    $( $(#[cfg($cfg)])* Route::$v => <$t as Transport>::NAME, )*
                }
            }
        }

        impl Endpoint {
            /// Its transport's route.
            pub fn route(&self) -> Route {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(_) => Route::$v, )* }
            }

            /// What it offers.
            #[inline]
            pub fn caps(&self) -> Caps {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::caps(x), )* }
            }

            /// Byte counters.
            pub fn counters(&self) -> Counters {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::counters(x), )* }
            }

            /// See [`Transport::try_send`].
            #[inline]
            pub fn try_send(
                &mut self,
                peer: u32,
                hdr: &Header,
                payload: &[u8],
            ) -> Result<bool, TransportError> {
                match self {
                    $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::try_send(x, peer, hdr, payload), )*
                }
            }

            /// See [`Transport::try_send_with`].
            #[inline]
            pub fn try_send_with(
                &mut self,
                peer: u32,
                hdr: &Header,
                len: usize,
                fill: &mut dyn FnMut(&mut [u8]),
            ) -> Result<bool, TransportError> {
                match self {
                    $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::try_send_with(x, peer, hdr, len, fill), )*
                }
            }

            /// See [`Transport::pop_from`].
            #[inline]
            pub fn pop_from(
                &mut self,
                peer: u32,
                take: &mut dyn FnMut(&Header, &[u8]) -> bool,
            ) -> Option<bool> {
                match self {
                    $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::pop_from(x, peer, take), )*
                }
            }

            /// See [`Transport::send_chunk`].
            pub fn send_chunk(
                &mut self,
                peer: u32,
                token: u64,
                offset: u64,
                data: &[u8],
            ) -> Result<usize, TransportError> {
                match self {
                    $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::send_chunk(x, peer, token, offset, data), )*
                }
            }

            /// See [`Transport::bulk_ops`].
            pub fn bulk_ops(&self, peer: u32, kind: MemKind) -> Ops {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::bulk_ops(x, peer, kind), )* }
            }

            /// See [`Transport::register`].
            pub fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::register(x, peer, m), )* }
            }

            /// See [`Transport::release`].
            pub fn release(&mut self, peer: u32, m: &MemRef) {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::release(x, peer, m), )* }
            }

            /// See [`Transport::get`].
            pub fn get(
                &mut self,
                peer: u32,
                dst: MemRef,
                key: &RKey,
                tok: u64,
            ) -> Result<Tx, TransportError> {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::get(x, peer, dst, key, tok), )* }
            }

            /// See [`Transport::put`].
            pub fn put(
                &mut self,
                peer: u32,
                src: MemRef,
                key: &RKey,
                tok: u64,
            ) -> Result<Tx, TransportError> {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::put(x, peer, src, key, tok), )* }
            }

            /// See [`Transport::quiesce`].
            pub fn quiesce(&mut self, peer: u32, tok: u64) {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::quiesce(x, peer, tok), )* }
            }

            /// See [`Transport::progress`].
            pub fn progress(
                &mut self,
                budget: usize,
                out: &mut dyn Deliver,
            ) -> Result<usize, TransportError> {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::progress(x, budget, out), )* }
            }

            /// See [`Transport::busy`].
            pub fn busy(&self) -> bool {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::busy(x), )* }
            }

            /// See [`Transport::has_queued_output`].
            pub fn has_queued_output(&self) -> bool {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::has_queued_output(x), )* }
            }

            /// See [`Transport::progress_syscalls`].
            pub fn progress_syscalls(&self) -> usize {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::progress_syscalls(x), )* }
            }

            /// See [`Transport::wait_fds`].
            pub fn wait_fds(&self, set: &mut PollSet) {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::wait_fds(x, set), )* }
            }

            /// See [`Transport::begin_sleep`].
            pub fn begin_sleep(&self) {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::begin_sleep(x), )* }
            }

            /// See [`Transport::end_sleep`].
            pub fn end_sleep(&self) {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::end_sleep(x), )* }
            }

            /// See [`Transport::dead_peer`].
            pub fn dead_peer(&mut self) -> Option<u32> {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::dead_peer(x), )* }
            }

            /// See [`Transport::forget_peer`].
            pub fn forget_peer(&mut self, peer: u32) {
                match self { $( $(#[cfg($cfg)])* Endpoint::$v(x) => <$t as Transport>::forget_peer(x, peer), )* }
            }
        }
    };
}

table! {
    /// Shared memory with the peers on this node.
    Shm: ShmNet => ShmNet,
    /// InfiniBand / RoCE verbs (or the simulated verbs fabric of a test).
    Ib: IbNet => Box<IbNet>,
    /// TCP.
    Tcp: TcpNet => TcpNet,
    /// The in-process simulated network (feature `sim`: tests; never chosen from records).
    #[cfg(feature = "sim")]
    Sim: SimEndpoint => SimEndpoint,
    /// CUDA IPC: device memory of the peers on this node, a bulk lane beside their route.
    Cuda: CudaEndpoint => CudaEndpoint,
}

impl Route {
    /// Its row of [`TABLE`] (`None`: this process).
    pub fn row(self) -> Option<&'static Row> {
        ROUTES.iter().position(|r| *r == self).map(|i| &TABLE[i])
    }

    /// The route of row `i` of [`TABLE`].
    pub fn of_row(i: usize) -> Route {
        ROUTES[i]
    }
}

impl Endpoint {
    /// Its transport's name (its counters' key).
    pub fn name(&self) -> &'static str {
        self.route().name()
    }

    /// Its row of [`TABLE`].
    pub fn row(&self) -> &'static Row {
        self.route().row().expect("an endpoint is a transport's")
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Listener")
    }
}

/// The transport `RCOMM_TRANSPORT` insists on, by name (`None`: any).
fn forced(choice: TransportChoice) -> Option<&'static str> {
    (choice != TransportChoice::Auto).then(|| choice.name())
}

/// Picks the transport between the ranks of records `ra` and `rb`: the first of the table
/// that carries messages, reaches the peer, and that `choice` allows. Each transport judges
/// from both records alone (NCCL's `canConnect`), so the choice is symmetric:
/// `select(a, b) == select(b, a)`.
pub fn select(ra: &AddrRecord, rb: &AddrRecord, choice: TransportChoice) -> Result<Route, String> {
    let (a, b) = (&ra.info, &rb.info);
    if a.same_node(b) && a.pid == b.pid {
        return Ok(Route::SelfLoop);
    }
    let forced = forced(choice);
    let allowed = |d: &Row| forced.is_none_or(|n| n == d.name);
    if let Some(i) = TABLE
        .iter()
        .position(|d| d.carries_messages() && allowed(d) && (d.can_connect)(ra, rb))
    {
        return Ok(Route::of_row(i));
    }
    Err(match TABLE.iter().find(|d| Some(d.name) == forced) {
        Some(d) => (d.refusal)(ra, rb),
        None => format!(
            "no transport reaches pid {} on {} from pid {} on {}",
            b.pid, b.hostname, a.pid, a.hostname
        ),
    })
}

/// The features a route's message lane has (none for this process).
pub fn features_of(route: Route) -> Features {
    route.row().map_or(Features::NONE, |d| d.features)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Kinds;

    #[test]
    fn the_table_holds_every_transport_once_in_route_order() {
        let names: Vec<&str> = TABLE.iter().map(|d| d.name).collect();
        assert_eq!(names, ["shm", "ib", "tcp", "sim", "cuda"]);
        for (i, d) in TABLE.iter().enumerate() {
            assert_eq!(names.iter().filter(|n| **n == d.name).count(), 1, "{d:?}");
            let r = Route::of_row(i);
            assert_eq!(r.name(), d.name);
            assert!(std::ptr::eq(r.row().unwrap(), d));
        }
        assert!(Route::SelfLoop.row().is_none());
        // Only message carriers can be routes; the device lane rides beside one.
        let bulk_only: Vec<&str> = TABLE
            .iter()
            .filter(|d| !d.carries_messages())
            .map(|d| d.name)
            .collect();
        assert_eq!(bulk_only, ["cuda"]);
        // Host windows come from exactly one transport.
        let host_windows = TABLE
            .iter()
            .filter(|d| d.windows.has(MemKind::Host))
            .count();
        assert_eq!(host_windows, 1);
    }

    /// An endpoint of every transport the tests can build here (`ib` on the simulated verbs
    /// fabric, `shm` with no node peers).
    fn endpoints() -> Vec<Endpoint> {
        use crate::ib::sim::{HcaSpec, PortSpec, SimConfig, SimFabric as VerbsFabric};
        let secret = rcomm_runtime::auth::Secret::random().unwrap();
        let job = format!("table{}", std::process::id());
        let l = crate::local::LocalListener::bind(&job, 0, secret.clone()).unwrap();
        let shm = ShmNet::connect(0, &l, &[], &secret, Default::default()).unwrap();
        let vf = VerbsFabric::new(SimConfig::default());
        vf.add_hca(HcaSpec {
            name: "sim0".into(),
            node_guid: 0x7000,
            ports: vec![PortSpec::ib(1, 0x7000, 0)],
        });
        let v = crate::ib::AnyVerbs::Sim(vf.host(&["sim0"]));
        let ib = IbNet::open(v, &[("sim0", 1)], 0, 2, Default::default()).unwrap();
        let sim = crate::sim_ep::SimFabric::new(Default::default()).unwrap();
        vec![
            Endpoint::Shm(shm),
            Endpoint::Ib(Box::new(ib)),
            Endpoint::Tcp(TcpNet::new(0, None, vec![None], Default::default(), secret)),
            Endpoint::Sim(sim.endpoint(0)),
            Endpoint::Cuda(CudaEndpoint::lazy()),
        ]
    }

    #[test]
    fn every_descriptor_offers_what_its_endpoint_answers() {
        let eps = endpoints();
        assert_eq!(eps.len(), TABLE.len(), "one endpoint per row");
        for e in &eps {
            let (d, c) = (e.row(), e.caps());
            assert_eq!(c.features, d.features, "{}", d.name);
            assert_eq!(c.ops.without(d.ops), Ops::NONE, "{}: {:?}", d.name, c.ops);
            assert!(d.kinds.contains(c.kinds), "{}: {:?}", d.name, c.kinds);
            assert_eq!(d.carries_messages(), c.ops.contains(Ops::AM), "{}", d.name);
            if !d.kinds.cuda {
                assert_eq!(e.bulk_ops(1, MemKind::Cuda { device: 0 }), Ops::NONE);
            }
            if d.kinds == Kinds::CUDA {
                assert_eq!(e.bulk_ops(1, MemKind::Host), Ops::NONE);
            }
        }
    }
}
