//! Neighbour collectives of the process topologies, [`CartComm`](crate::CartComm) and
//! [`GraphComm`](crate::GraphComm): `MPI_Neighbor_allgather(v)`, `MPI_Neighbor_alltoall(v)`
//! and their non-blocking forms `MPI_Ineighbor_*`, which return a [`NeighborRequest`].
//!
//! On each rank a topology lists its *in-neighbours* (block k of a receive buffer comes from
//! the k-th) and its *out-neighbours* (block k of a send buffer goes to the k-th); a grid's
//! missing neighbours, off the edge of a non-periodic dimension, are `MPI_PROC_NULL`: nothing
//! moves there and their receive blocks are left as they were. Every block is one
//! point-to-point message on the communicator's internal context, so neighbour traffic never
//! meets user messages. A receive must get exactly its block's length (an error otherwise);
//! receive blocks may not overlap, and every block must lie inside its buffer — both checked
//! before anything moves.
//!
//! **Pairing.** Between two ranks the blocks of one call pair in order: with several edges
//! from p to q, the i-th block p sends to q lands in the i-th block q receives from p (MPI's
//! rule for multigraphs); on a grid, what p sends to its +1 neighbour in a dimension lands in
//! the block that neighbour receives from its −1 neighbour, and the other way round.
//!
//! **Tags.** A blocking call uses fixed internal tags (a grid: one per direction; a graph: one
//! per occurrence of an edge between two ranks): it completes before the next call starts.
//! A non-blocking call takes the communicator's next collective sequence number — the tag
//! rcomm's other collectives run on — as the one tag of all its messages, and relies on
//! messages between two ranks matching in the order they were posted (receives are posted in
//! the order their sources send). So non-blocking neighbour calls outstanding together,
//! blocking neighbour calls and other collectives made meanwhile never take one another's
//! messages, and the messages of a request dropped early stay unmatched instead of landing in
//! a later call. Like every collective, a non-blocking neighbour call must be started in the
//! same order on every rank of the communicator (MPI's rule); a rank whose arguments are
//! refused still uses up the sequence number, so later calls stay in step.
//!
//! **Buffers.** Blocking calls borrow theirs. Non-blocking calls own theirs, like
//! [`Communicator::irecv`]: the request holds the send and receive vectors until
//! [`NeighborRequest::wait`] hands the receive vector back (its blocks filled, every other
//! element as it was). Dropping a request before it completes cancels the receives no message
//! has matched yet and lets the rest finish in the background with the buffers it owns.

use crate::coll_state::Advance;
use crate::comm::{Communicator, Shared};
use crate::p2p::engine::ReqId;
use crate::p2p::matcher::{Source, TagSel};
use crate::p2p::region::Region;
use crate::{CommError, Result};
use bytemuck::{Pod, cast_slice, cast_slice_mut};
use std::sync::{Arc, Mutex, Weak};

/// One send of a neighbour exchange: (destination in the communicator, tag, bytes).
type OutBlock<'a> = (u32, i32, &'a [u8]);
/// One receive of a neighbour exchange: (source in the communicator, tag, where it lands).
type InBlock<'a> = (u32, i32, &'a mut [u8]);

/// One rank's edges as an exchange sees them: (rank, tag of the blocking exchange) per block,
/// `None` for no neighbour.
#[derive(Debug, Clone)]
pub(crate) struct Edges {
    /// Per send block: where it goes.
    pub(crate) out: Vec<Option<(u32, i32)>>,
    /// Per receive block: where it comes from.
    pub(crate) inn: Vec<Option<(u32, i32)>>,
    /// The order in which a non-blocking exchange (one tag for every block) posts its receive
    /// blocks: from each source, in the order that source sends them.
    pub(crate) recv_order: Vec<usize>,
}

/// Counts and displacements (in elements) of the send and the receive blocks.
pub(crate) struct Layout {
    send_counts: Vec<usize>,
    send_displs: Vec<usize>,
    recv_counts: Vec<usize>,
    recv_displs: Vec<usize>,
}

/// Blocks of `b` elements back to back.
fn packed(n: usize, b: usize) -> Vec<usize> {
    (0..n).map(|k| k * b).collect()
}

impl Layout {
    /// `MPI_Neighbor_allgather`: all of `send` to every out-neighbour, `send_len` elements from
    /// each in-neighbour, back to back in a receive buffer of `recv_len`.
    pub(crate) fn allgather(e: &Edges, send_len: usize, recv_len: usize) -> Result<Layout> {
        let (ni, no, b) = (e.inn.len(), e.out.len(), send_len);
        if Some(recv_len) != b.checked_mul(ni) {
            return Err(CommError::InvalidArg(format!(
                "neighbor_allgather: the receive buffer holds {recv_len} elements, {ni} \
                 neighbours send {b} each"
            )));
        }
        Ok(Layout {
            send_counts: vec![b; no],
            send_displs: vec![0; no],
            recv_counts: vec![b; ni],
            recv_displs: packed(ni, b),
        })
    }

    /// `MPI_Neighbor_allgatherv`: all of `send` to every out-neighbour, `recv_counts[k]`
    /// elements from in-neighbour k at `recv_displs[k]` (checked when the exchange starts).
    pub(crate) fn allgatherv(
        e: &Edges,
        send_len: usize,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Layout {
        Layout {
            send_counts: vec![send_len; e.out.len()],
            send_displs: vec![0; e.out.len()],
            recv_counts: recv_counts.to_vec(),
            recv_displs: recv_displs.to_vec(),
        }
    }

    /// `MPI_Neighbor_alltoall`: equal blocks, one per out-neighbour in `send` and one per
    /// in-neighbour in the receive buffer.
    pub(crate) fn alltoall(e: &Edges, send_len: usize, recv_len: usize) -> Result<Layout> {
        let (ni, no) = (e.inn.len(), e.out.len());
        let b = match (no, ni) {
            (0, 0) => 0,
            (0, _) => recv_len / ni,
            _ => send_len / no,
        };
        if send_len != b * no || recv_len != b * ni {
            return Err(CommError::InvalidArg(format!(
                "neighbor_alltoall: {send_len} elements to send to {no} neighbours and \
                 {recv_len} to receive from {ni} are not equal blocks"
            )));
        }
        Ok(Layout {
            send_counts: vec![b; no],
            send_displs: packed(no, b),
            recv_counts: vec![b; ni],
            recv_displs: packed(ni, b),
        })
    }

    /// `MPI_Neighbor_alltoallv`: as given (checked when the exchange starts).
    pub(crate) fn alltoallv(
        send_counts: &[usize],
        send_displs: &[usize],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Layout {
        Layout {
            send_counts: send_counts.to_vec(),
            send_displs: send_displs.to_vec(),
            recv_counts: recv_counts.to_vec(),
            recv_displs: recv_displs.to_vec(),
        }
    }
}

/// Splits `recv` into blocks of `counts[k]` elements at `displs[k]` (in elements); blocks may
/// not overlap (checked).
fn blocks_mut<'a>(
    buf: &'a mut [u8],
    elem: usize,
    counts: &[usize],
    displs: &[usize],
    op: &str,
) -> Result<Vec<&'a mut [u8]>> {
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by_key(|&k| displs[k]);
    let mut end = 0;
    let mut out: Vec<Option<&'a mut [u8]>> = (0..counts.len()).map(|_| None).collect();
    let mut rest = buf;
    let mut base = 0;
    for k in order {
        let (lo, n) = (displs[k] * elem, counts[k] * elem);
        if n == 0 {
            out[k] = Some(&mut []);
            continue;
        }
        if lo < end {
            return Err(CommError::InvalidArg(format!(
                "{op}: receive block {k} (elements {}..{}) overlaps another",
                displs[k],
                displs[k] + counts[k]
            )));
        }
        let r = std::mem::take(&mut rest);
        let (_, tail) = r.split_at_mut(lo - base);
        let (blk, tail) = tail.split_at_mut(n);
        out[k] = Some(blk);
        rest = tail;
        base = lo + n;
        end = lo + n;
    }
    Ok(out
        .into_iter()
        .map(|b| b.expect("every block placed"))
        .collect())
}

/// Checks vector-variant arguments: `counts`/`displs` one per neighbour, every block inside
/// the buffer of `len` elements.
fn check_v(
    op: &str,
    side: &str,
    nb: usize,
    counts: &[usize],
    displs: &[usize],
    len: usize,
) -> Result<()> {
    if counts.len() != nb || displs.len() != nb {
        return Err(CommError::InvalidArg(format!(
            "{op}: {} {side} counts and {} displacements for {nb} neighbours",
            counts.len(),
            displs.len()
        )));
    }
    for k in 0..nb {
        if displs[k].checked_add(counts[k]).is_none_or(|end| end > len) {
            return Err(CommError::InvalidArg(format!(
                "{op}: {side} block {k} (elements {}..+{}) is outside the buffer of {len}",
                displs[k], counts[k]
            )));
        }
    }
    Ok(())
}

/// The blocks of an exchange after the checks: the sends in block order (neighbours only) and
/// the receives per block (`None`: no neighbour).
#[allow(clippy::type_complexity)]
fn split<'a, T: Pod>(
    e: &Edges,
    send: &'a [T],
    recv: &'a mut [T],
    l: &Layout,
    op: &str,
) -> Result<(Vec<OutBlock<'a>>, Vec<Option<InBlock<'a>>>)> {
    let (sc, sd) = (&l.send_counts, &l.send_displs);
    check_v(op, "send", e.out.len(), sc, sd, send.len())?;
    let (rc, rd) = (&l.recv_counts, &l.recv_displs);
    check_v(op, "receive", e.inn.len(), rc, rd, recv.len())?;
    let elem = size_of::<T>();
    let sb = cast_slice::<T, u8>(send);
    let out = (e.out.iter().enumerate())
        .filter_map(|(k, to)| to.map(|(r, t)| (r, t, &sb[sd[k] * elem..(sd[k] + sc[k]) * elem])))
        .collect();
    let blocks = blocks_mut(cast_slice_mut::<T, u8>(recv), elem, rc, rd, op)?;
    let inb = (blocks.into_iter().zip(&e.inn))
        .map(|(b, from)| from.map(|(r, t)| (r, t, b)))
        .collect();
    Ok((out, inb))
}

/// The requests of a started exchange: receives (request, source, bytes expected) and sends.
#[derive(Debug, Default)]
struct Posted {
    recvs: Vec<(ReqId, u32, usize)>,
    sends: Vec<ReqId>,
}

/// Posts the receives (in the order given), then the sends. On an error the receives nobody
/// matched yet are taken back (what did not start cannot be waited for, and the waits would
/// wait for sends that never come); what started is returned with the error.
fn post<'a>(
    c: &Communicator,
    out: &[OutBlock<'_>],
    inb: impl IntoIterator<Item = InBlock<'a>>,
    op: &'static str,
) -> (Posted, Option<CommError>) {
    let ctx = c.internal();
    let mut p = Posted::default();
    let mut err = None;
    let mut e = c.shared().lock();
    for (src, tag, blk) in inb {
        let want = blk.len();
        let posted = c.world_rank(src).and_then(|w| {
            e.irecv(
                ctx,
                Source::Rank(w),
                TagSel::Tag(tag),
                Region::from_mut(blk),
                op,
            )
        });
        match posted {
            Ok(r) => p.recvs.push((r, src, want)),
            Err(x) => {
                err = Some(x);
                break;
            }
        }
    }
    if err.is_none() {
        for &(dst, tag, blk) in out {
            match (c.world_rank(dst)).and_then(|w| e.isend(ctx, w, tag, Region::from_ref(blk), op))
            {
                Ok(r) => p.sends.push(r),
                Err(x) => {
                    err = Some(x);
                    break;
                }
            }
        }
    }
    if err.is_some() {
        p.recvs.retain(|&(r, _, _)| !e.cancel(r));
    }
    (p, err)
}

/// Waits for every request of `p`; a receive must have got exactly its block's length. The
/// first error (`err` first) after all have completed.
fn finish(c: &Communicator, p: Posted, err: Option<CommError>, op: &str) -> Result<()> {
    let mut first = err;
    for (r, src, want) in p.recvs {
        match c.shared().wait(r) {
            Ok(st) if st.bytes != want => {
                first.get_or_insert(CommError::InvalidArg(format!(
                    "{op}: rank {src} sent {} bytes where {want} were expected",
                    st.bytes
                )));
            }
            Ok(_) => {}
            Err(x) => {
                first.get_or_insert(x);
            }
        }
    }
    for r in p.sends {
        if let Err(x) = c.shared().wait(r) {
            first.get_or_insert(x);
        }
    }
    first.map_or(Ok(()), Err)
}

/// A blocking neighbour exchange: block k of `send` to out-neighbour k, in-neighbour k's into
/// block k of `recv`, as `l` places them.
pub(crate) fn exchange<T: Pod>(
    c: &Communicator,
    e: &Edges,
    send: &[T],
    recv: &mut [T],
    l: &Layout,
    op: &'static str,
) -> Result<()> {
    let (out, inb) = split(e, send, recv, l, op)?;
    let (p, err) = post(c, &out, inb.into_iter().flatten(), op);
    finish(c, p, err, op)
}

/// Starts a non-blocking neighbour exchange over owned buffers (see the module notes); `l` is
/// the layout, or why the arguments have none.
pub(crate) fn start<T: Pod + Send>(
    c: &Communicator,
    e: &Edges,
    send: Vec<T>,
    mut recv: Vec<T>,
    l: Result<Layout>,
    op: &'static str,
) -> Result<NeighborRequest<T>> {
    // Taken before the arguments are checked: every rank's sequence moves alike.
    let tag = c.next_coll_tag().0;
    let l = l?;
    let (p, err) = {
        let (out, mut inb) = split(e, &send, &mut recv, &l, op)?;
        let out: Vec<OutBlock<'_>> = out.into_iter().map(|(r, _, b)| (r, tag, b)).collect();
        let inb = (e.recv_order.iter())
            .filter_map(|&k| inb[k].take())
            .map(|(r, _, b)| (r, tag, b));
        // The regions point into the vectors' heap blocks, which moving the vectors into the
        // request does not move; the request keeps them until every request completed.
        post(c, &out, inb, op)
    };
    if err.is_some() {
        return Err(finish(c, p, err, op).expect_err("the posting error"));
    }
    // With a progress thread (`RCOMM_ASYNC_PROGRESS=1`), it moves the blocks on while the
    // caller computes, as it does for the other non-blocking collectives.
    let watch = Arc::new(Mutex::new(Watch {
        shared: Arc::downgrade(c.shared()),
        reqs: (p.recvs.iter().map(|x| x.0))
            .chain(p.sends.iter().copied())
            .collect(),
        over: false,
    }));
    if let Some(pr) = &c.shared().coll.progress
        && !(p.recvs.is_empty() && p.sends.is_empty())
    {
        pr.register(watch.clone(), c.shared());
    }
    Ok(NeighborRequest {
        comm: c.clone(),
        posted: p,
        bufs: Some((send, recv)),
        op,
        watch,
    })
}

/// What the progress thread sees of a request: its point-to-point requests, until they have
/// all completed or the owner takes them (its wait or drop sets `over` first, so the thread
/// never looks at a request id after it was handed back).
struct Watch {
    shared: Weak<Shared>,
    reqs: Vec<ReqId>,
    over: bool,
}

impl Advance for Watch {
    fn advance(&mut self, _block: bool) -> Result<bool> {
        if !self.over
            && let Some(sh) = self.shared.upgrade()
        {
            let e = sh.lock();
            self.over = self.reqs.iter().all(|&r| e.is_done(r));
        }
        Ok(self.over)
    }

    fn finished(&self) -> bool {
        self.over
    }

    fn pending_reqs(&self, out: &mut Vec<ReqId>) {
        if !self.over {
            out.extend(&self.reqs);
        }
    }
}

/// A non-blocking neighbour collective (`MPI_Ineighbor_*`) that owns its buffers: block
/// messages in flight to and from the neighbours. [`wait`](Self::wait) hands back the receive
/// buffer. Dropping it early cancels the receives not yet matched and lets the rest finish in
/// the background (see the [module notes](self)). With `RCOMM_ASYNC_PROGRESS=1` the progress
/// thread moves its blocks on while the caller computes; otherwise they move in `test`, `wait`
/// and the caller's other rcomm calls. It can join mixed request sets
/// ([`wait_all_of`](crate::wait_all_of), [`test_some_of`](crate::test_some_of), …), which
/// say which requests completed; each one's `wait` then hands back its buffer at once.
#[must_use = "a neighbour request does nothing useful unless waited for"]
pub struct NeighborRequest<T: Pod + Send> {
    comm: Communicator,
    posted: Posted,
    /// (send, receive), held until every request completed.
    bufs: Option<(Vec<T>, Vec<T>)>,
    op: &'static str,
    /// Shared with the progress thread, if there is one.
    watch: Arc<Mutex<Watch>>,
}

impl<T: Pod + Send> std::fmt::Debug for NeighborRequest<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NeighborRequest")
            .field("op", &self.op)
            .field("posted", &self.posted)
            .finish()
    }
}

impl<T: Pod + Send> NeighborRequest<T> {
    /// Waits for every block; hands back the receive buffer. An error (a block of the wrong
    /// length, a lost peer) comes after every block has completed; the buffers go with it.
    pub fn wait(self) -> Result<Vec<T>> {
        self.wait_buffers().map(|(_, recv)| recv)
    }

    /// [`wait`](Self::wait), handing back the send buffer too: (send, receive), to reuse both.
    pub fn wait_buffers(mut self) -> Result<(Vec<T>, Vec<T>)> {
        self.release();
        let p = std::mem::take(&mut self.posted);
        let res = finish(&self.comm, p, None, self.op);
        let bufs = self.bufs.take().expect("buffers held until the wait");
        res.map(|()| bufs)
    }

    /// Whether every block has completed (progressing once); errors show in
    /// [`wait`](Self::wait), which then returns at once.
    pub fn test(&mut self) -> bool {
        let s = &self.comm.shared();
        let mut all = true;
        // Every request is tested (not stopping at the first pending one): each test
        // progresses.
        for r in (self.posted.recvs.iter().map(|x| x.0)).chain(self.posted.sends.iter().copied()) {
            all &= s.test_req(r);
        }
        all
    }
}

/// In a mixed request set ([`wait_all_of`](crate::wait_all_of), [`test_some_of`](crate::test_some_of), …).
impl<T: Pod + Send> crate::Pending for NeighborRequest<T> {
    fn poll(&mut self) -> bool {
        self.test()
    }
}

impl<T: Pod + Send> NeighborRequest<T> {
    /// Tells the progress thread to forget the requests (before they are taken).
    fn release(&self) {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).over = true;
    }
}

impl<T: Pod + Send> Drop for NeighborRequest<T> {
    fn drop(&mut self) {
        self.release();
        let p = std::mem::take(&mut self.posted);
        if p.recvs.is_empty() && p.sends.is_empty() {
            return;
        }
        // Every request still in flight keeps both buffers alive; the last to finish frees them.
        let keep = Arc::new(Mutex::new(self.bufs.take()));
        let mut e = self.comm.shared().lock();
        for (r, _, _) in p.recvs {
            if !e.cancel(r) {
                e.orphan(r, Box::new(keep.clone()));
            }
        }
        for r in p.sends {
            e.orphan(r, Box::new(keep.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_blocks_land_at_their_displacements_and_overlaps_are_refused() {
        let mut buf: Vec<u8> = (0..10).collect();
        let b = blocks_mut(&mut buf, 2, &[1, 0, 2], &[3, 1, 0], "t").unwrap();
        let got: Vec<Vec<u8>> = b.iter().map(|x| x.to_vec()).collect();
        assert_eq!(got, [vec![6, 7], vec![], vec![0, 1, 2, 3]]);
        // Block 0 (elements 1..3) and block 1 (elements 2..4) overlap.
        assert!(blocks_mut(&mut buf, 1, &[2, 2], &[1, 2], "t").is_err());
        // An empty block inside another is no overlap.
        assert!(blocks_mut(&mut buf, 1, &[4, 0], &[0, 2], "t").is_ok());
        assert!(check_v("t", "receive", 2, &[1, 1], &[0, 9], 10).is_ok());
        assert!(
            check_v("t", "receive", 2, &[1, 2], &[0, 9], 10).is_err(),
            "past the end"
        );
        assert!(
            check_v("t", "receive", 2, &[1], &[0, 1], 10).is_err(),
            "too few counts"
        );
        assert!(
            check_v("t", "send", 1, &[1], &[usize::MAX], 10).is_err(),
            "overflow"
        );
    }

    fn edges(no: usize, ni: usize) -> Edges {
        Edges {
            out: vec![Some((0, 0)); no],
            inn: vec![Some((0, 0)); ni],
            recv_order: (0..ni).collect(),
        }
    }

    #[test]
    fn layouts_of_the_fixed_size_calls_and_their_refusals() {
        let l = Layout::allgather(&edges(2, 3), 4, 12).unwrap();
        assert_eq!(
            (l.send_counts, l.send_displs, l.recv_counts, l.recv_displs),
            (vec![4, 4], vec![0, 0], vec![4; 3], vec![0, 4, 8])
        );
        assert!(Layout::allgather(&edges(2, 3), 4, 11).is_err());
        assert!(
            Layout::allgather(&edges(2, 3), usize::MAX, 3).is_err(),
            "overflow"
        );
        let l = Layout::alltoall(&edges(2, 3), 4, 6).unwrap();
        assert_eq!(
            (l.send_counts, l.send_displs, l.recv_counts, l.recv_displs),
            (vec![2, 2], vec![0, 2], vec![2; 3], vec![0, 2, 4])
        );
        assert!(Layout::alltoall(&edges(2, 3), 4, 7).is_err());
        assert!(Layout::alltoall(&edges(2, 3), 5, 6).is_err());
        assert!(
            Layout::alltoall(&edges(0, 2), 0, 6).is_ok(),
            "no destinations"
        );
        assert!(
            Layout::alltoall(&edges(0, 0), 0, 0).is_ok(),
            "no neighbours"
        );
        assert!(Layout::alltoall(&edges(0, 0), 1, 0).is_err());
    }
}
