//! `ib` as a transport of the table: its side of [`crate::transport::Transport`].

use crate::caps::{Caps, Features, Kinds, Ops};
use crate::error::TransportError;
use crate::mem::{MemRef, RKey};
use crate::transport::{ConnectCx, Counters, Deliver, ListenCx, ListenError, Transport, Tx};
use rcomm_runtime::wire::{AddrRecord, Header};

use super::{IbNet, blob_of, can_connect, conn, setup};

/// The contract: messages, streamed chunks and one-sided GET and PUT over RC queue pairs;
/// registered memory, whose keys are released when the peer is done (they pin pages); device
/// memory where the NIC reaches it (GPUDirect RDMA); completions on a channel a sleeping rank
/// polls.
impl Transport for IbNet {
    const NAME: &'static str = "ib";
    const ADDR_KIND: u8 = conn::ENDPOINT_KIND;
    const OFFERS: (Ops, Kinds, Features) = (
        Ops::AM.with(Ops::GET).with(Ops::PUT).with(Ops::STREAM),
        Kinds {
            host: true,
            cuda: true,
        },
        Features::RELEASES_KEYS.with(Features::POLLABLE_OUTPUT),
    );
    type Listener = IbNet;

    fn can_connect(a: &AddrRecord, b: &AddrRecord) -> bool {
        can_connect(a, b)
    }

    fn refusal(ra: &AddrRecord, rb: &AddrRecord) -> String {
        let (a, b) = (&ra.info, &rb.info);
        let has = |r: &AddrRecord| blob_of(r).is_some();
        let why = |r: &AddrRecord| {
            if has(r) {
                "has an active RDMA port"
            } else {
                "has no usable RDMA device (see its log under RCOMM_DEBUG_SUBSYS=NET, or rcomm-topo)"
            }
        };
        format!(
            "RCOMM_TRANSPORT=ib, but pid {} on {} {} and pid {} on {} {}{}; use auto or tcp",
            a.pid,
            a.hostname,
            why(ra),
            b.pid,
            b.hostname,
            why(rb),
            if has(ra) && has(rb) {
                ", on another fabric (link layer or subnet prefix)"
            } else {
                ""
            }
        )
    }

    /// The endpoint itself, QPs made for every peer, where the settings and the machine call
    /// for one ([`setup::open_for_rank`]).
    fn listen(cx: &ListenCx<'_>) -> Result<Option<IbNet>, ListenError> {
        setup::open_for_rank(cx.cfg, cx.local_rank, cx.local_size, cx.rank, cx.size)
            .map_err(|why| ListenError::Env(format!("RCOMM_TRANSPORT=ib: {why}")))
    }

    fn address(l: &IbNet) -> Option<Vec<u8>> {
        Some(l.blob().encode())
    }

    /// Every QP to RTS from the peer's blob, now (no round trip needed); dropped when no peer
    /// is reached over `ib`.
    fn connect(l: Option<IbNet>, cx: &ConnectCx<'_>) -> Result<Option<Self>, TransportError> {
        let Some(mut ep) = l else { return Ok(None) };
        let mut any = false;
        for r in cx.peers() {
            let blob =
                blob_of(&cx.records[r as usize]).ok_or_else(|| TransportError::Protocol {
                    peer: r,
                    why: "its ib connection blob does not decode".into(),
                })?;
            ep.connect(r, &blob)?;
            any = true;
        }
        Ok(any.then_some(ep))
    }

    fn caps(&self) -> Caps {
        IbNet::caps(self)
    }

    fn counters(&self) -> Counters {
        IbNet::counters(self)
    }

    #[inline]
    fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        IbNet::try_send(self, peer, hdr, payload)
    }

    fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        IbNet::send_chunk(self, peer, token, offset, data)
    }

    fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        IbNet::register(self, peer, m)
    }

    fn release(&mut self, _peer: u32, m: &MemRef) {
        IbNet::release(self, m)
    }

    fn get(&mut self, peer: u32, dst: MemRef, key: &RKey, tok: u64) -> Result<Tx, TransportError> {
        IbNet::get(self, peer, dst, key, tok)
    }

    fn put(&mut self, peer: u32, src: MemRef, key: &RKey, tok: u64) -> Result<Tx, TransportError> {
        IbNet::put(self, peer, src, key, tok)
    }

    fn quiesce(&mut self, peer: u32, tok: u64) {
        IbNet::quiesce(self, peer, tok)
    }

    fn progress(&mut self, budget: usize, out: &mut dyn Deliver) -> Result<usize, TransportError> {
        IbNet::progress(self, budget, out)
    }

    fn wait_fds(&self, set: &mut rcomm_runtime::os::PollSet) {
        IbNet::wait_fds(self, set)
    }

    /// Completions (credits among them) then arrive on the armed CQs' channels.
    fn begin_sleep(&self) {
        self.arm()
    }
}
