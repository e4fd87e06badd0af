//! The flight recorder: each process keeps its last `RCOMM_FR_SIZE` operations (default 2048)
//! — communicator, collective number, operation, element type, size, root or peer, algorithm,
//! state and times — so that when a job hangs, every rank can say where it is. On a watchdog
//! timeout (`RCOMM_TIMEOUT`), `rcomm-run --dump` or SIGUSR1 to `rcomm-run`, the launcher asks
//! every rank for its recorder ([`crate::wire::FlightDump`], sent by the rank's key-value
//! store reader thread, whatever its other threads do) and prints a hang report.
//!
//! **Cost.** A record is eight atomic words in a ring allocated once (no allocation, no lock):
//! an operation claims its slot with one `fetch_add`, writes it with plain stores and stamps it
//! — and no clock: an operation is timed (coarse monotonic clock, 1–4 ms resolution, plenty
//! for hangs) once it waits past the spin phase ([`Recorder::mark_slow`], from the watchdog's
//! first look, where the clock is read anyway) or is posted without being waited for; its end
//! then too, or when it fails. A fast collective, done microseconds after it starts, carries
//! no times: reading even the coarse clock would cost as much as the rest of the record. Its
//! end changes its state. Collectives are recorded on entry; point-to-point operations only
//! once they wait past the spin phase, so a fast send or receive costs nothing
//! (docs/performance.md has the measurement).
//!
//! **Consistency.** A slot is a seqlock: the writer clears its id, writes the fields and stores
//! the id again; a reader keeps a slot only if it saw the same non-zero id before and after.
//! The end of an operation changes only its state and end time, which a reader may see in any
//! combination — harmless for a diagnostic.

use crate::algo::Algo;
use crate::wire::{DumpRecord, FlightDump, MAX_COMM_NAME, MAX_DUMP_RECORDS};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Mutex, OnceLock};

/// Device operations (NCCL's) whose stream and number are kept beside their records.
const DEVICE_OPS: usize = 1024;

/// An operation handed to a device engine (NCCL): the stream it was enqueued on and its number
/// among that engine's operations on the communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceOp {
    /// The stream's raw handle (`cudaStream_t` as an integer).
    pub stream: u64,
    /// NCCL's operation number on the communicator (1 = its first).
    pub seq: u64,
}

/// The device operations of the recent records: the eight words of a slot have no room for
/// them, and few records have them.
#[derive(Default)]
struct DeviceOps {
    by_id: HashMap<u64, DeviceOp>,
    order: VecDeque<u64>,
}

/// No root or peer.
pub const NO_PEER: u32 = u32::MAX;

/// Context ids a process can have (`2 × MAX_IDS` of the communicator layer); the comm table is
/// indexed by `ctx / 2`.
const MAX_CTX: usize = 4096;

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// A non-blocking collective started and not yet waited for to the end.
    Posted = 1,
    /// In a blocking call (or its wait).
    Waiting = 2,
    /// Completed.
    Done = 3,
    /// Ended with an error.
    Failed = 4,
    /// Ended by a watchdog (`RCOMM_TIMEOUT`, `RCOMM_P2P_TIMEOUT`).
    TimedOut = 5,
}

impl State {
    /// How the hang report names it.
    pub const fn name(self) -> &'static str {
        match self {
            State::Posted => "posted",
            State::Waiting => "waiting",
            State::Done => "done",
            State::Failed => "failed",
            State::TimedOut => "timed out",
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => State::Posted,
            2 => State::Waiting,
            3 => State::Done,
            4 => State::Failed,
            5 => State::TimedOut,
            _ => return None,
        })
    }

    /// Whether the operation has ended.
    pub fn ended(self) -> bool {
        matches!(self, State::Done | State::Failed | State::TimedOut)
    }
}

/// Operation names a record can hold (stored as index + 1; 0 = none).
pub const OPS: &[&str] = &[
    "allreduce",
    "bcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "gather",
    "scatter",
    "scan",
    "barrier",
    "split",
    "dup",
    "create",
    "send",
    "recv",
    "sendrecv",
    "isend",
    "irecv",
    "probe",
    "mprobe",
    "mrecv",
    "wait",
    "collective",
];
/// Element type names, in the order of `rcomm_kernels::Dtype` (code = `dtype as u8 + 1`).
pub const DTYPES: &[&str] = &[
    "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
];
/// Reduction names, in the order of `rcomm_kernels::Op` (code = `op as u8 + 1`), then user
/// operations.
pub const REDOPS: &[&str] = &[
    "sum", "prod", "min", "max", "band", "bor", "bxor", "avg", "user op",
];
fn code(table: &[&str], s: &str) -> u64 {
    table
        .iter()
        .position(|t| *t == s)
        .map_or(0, |i| i as u64 + 1)
}

/// The code of an element type name ([`DTYPES`]; 0 for none or unknown).
pub fn dtype_code(name: &str) -> u8 {
    code(DTYPES, name) as u8
}

/// The code of a reduction name ([`REDOPS`]; 0 for none or unknown).
pub fn redop_code(name: &str) -> u8 {
    code(REDOPS, name) as u8
}

fn name(table: &[&'static str], c: u64) -> &'static str {
    (c as usize)
        .checked_sub(1)
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or("")
}

/// What an operation is, as given to [`Recorder::begin`].
#[derive(Debug, Clone, Copy)]
pub struct Begin<'a> {
    /// Context id of the communicator.
    pub ctx: u32,
    /// Operation, one of [`OPS`].
    pub op: &'a str,
    /// Element type, as a code ([`dtype_code`]; 0 for none).
    pub dtype: u8,
    /// Reduction, as a code ([`redop_code`]; 0 for none).
    pub redop: u8,
    /// Algorithm, if one is chosen.
    pub algo: Option<Algo>,
    /// Bytes of the vector or message.
    pub bytes: u64,
    /// Root or peer (world rank), or [`NO_PEER`].
    pub peer: u32,
    /// Its state now.
    pub state: State,
    /// A collective (numbered per communicator), or a point-to-point operation.
    pub collective: bool,
    /// Already waiting past the spin phase (its end is timed).
    pub slow: bool,
}

/// Flag bits of a record (word 4, from bit 40).
const SLOW: u64 = 1 << 40;

/// A recorded operation, for its owner to update and to name in errors. Two words, so that a
/// thread can keep a stack of them cheaply: the record's id, and its context id (24 bits),
/// operation (8) and collective number (32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// The process's operation number (0: not recorded).
    pub id: u64,
    meta: u64,
}

const NO_CTX: u64 = 0xff_ffff;

impl Handle {
    /// No operation.
    pub const NONE: Handle = Handle {
        id: 0,
        meta: NO_CTX,
    };

    /// A handle of operation `op` (one of [`OPS`]) number `seq` on context `ctx`, not
    /// recorded (`id` 0) — for tests and for operations numbered with the recorder off.
    pub fn new(ctx: u32, seq: u64, op: &str) -> Self {
        Self::pack(0, ctx, seq, code(OPS, op))
    }

    fn pack(id: u64, ctx: u32, seq: u64, op: u64) -> Self {
        Handle {
            id,
            meta: u64::from(ctx) & NO_CTX | op << 24 | seq << 32,
        }
    }

    /// Context id of its communicator.
    pub fn ctx(&self) -> u32 {
        (self.meta & NO_CTX) as u32
    }

    /// Collective number on the communicator (0 for point-to-point; modulo 2³²).
    pub fn seq(&self) -> u64 {
        self.meta >> 32
    }

    /// The operation's name.
    pub fn op_name(&self) -> &'static str {
        name(OPS, self.meta >> 24 & 0xff)
    }

    /// Whether this names an operation (recorded or merely numbered).
    pub fn is_some(&self) -> bool {
        self.meta & NO_CTX != NO_CTX
    }
}

/// One slot: `[id, ctx|state|op|dtype|algo, seq, bytes, peer|redop, start, end, first|size]`.
#[repr(C, align(64))]
#[derive(Default)]
struct Slot([AtomicU64; 8]);

/// Per communicator: collectives started, and its shape (lowest world rank, size).
#[derive(Default)]
struct CommSlot {
    seq: AtomicU64,
    shape: AtomicU64,
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Operation number.
    pub id: u64,
    /// Context id.
    pub ctx: u32,
    /// Lowest world rank of the communicator.
    pub comm_first: u32,
    /// Its size.
    pub comm_size: u32,
    /// Collective number (0: point-to-point).
    pub seq: u64,
    /// Operation.
    pub op: &'static str,
    /// Element type.
    pub dtype: &'static str,
    /// Reduction.
    pub redop: &'static str,
    /// Algorithm.
    pub algo: Option<Algo>,
    /// Bytes.
    pub bytes: u64,
    /// Root or peer.
    pub peer: u32,
    /// State.
    pub state: State,
    /// Start (µs; 0 for a fast operation that never waited).
    pub start_us: u64,
    /// End (µs; 0 while running, and for a fast operation that ended well).
    pub end_us: u64,
    /// Run by NCCL (the hang report says `nccl`): its stream and NCCL operation number.
    pub device: Option<DeviceOp>,
}

/// The recorder of one process.
pub struct Recorder {
    /// A power of two of them: a slot is found with a mask, not a division.
    slots: Box<[Slot]>,
    next: AtomicU64,
    comms: Box<[CommSlot]>,
    names: Mutex<Vec<(u32, String)>>,
    device_ops: Mutex<DeviceOps>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("capacity", &self.slots.len())
            .field("recorded", &self.next.load(Ordering::Relaxed))
            .finish()
    }
}

/// The process's recorder, sized by `RCOMM_FR_SIZE` on first use.
pub fn recorder() -> &'static Recorder {
    static R: OnceLock<Recorder> = OnceLock::new();
    R.get_or_init(|| {
        let n = crate::config::global().as_ref().map_or(2048, |c| c.fr_size);
        Recorder::new(n)
    })
}

/// The coarse monotonic clock, µs.
pub fn now_us() -> u64 {
    crate::os::monotonic_coarse_us()
}

impl Recorder {
    /// A recorder keeping the last `capacity` operations, rounded up to a power of two (0:
    /// records nothing, but still numbers collectives, which errors name).
    pub fn new(capacity: usize) -> Self {
        let n = if capacity == 0 {
            0
        } else {
            capacity.next_power_of_two()
        };
        Self {
            slots: (0..n).map(|_| Slot::default()).collect(),
            next: AtomicU64::new(0),
            comms: (0..MAX_CTX / 2).map(|_| CommSlot::default()).collect(),
            names: Mutex::new(Vec::new()),
            device_ops: Mutex::new(DeviceOps::default()),
        }
    }

    /// How many operations it keeps.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn comm(&self, ctx: u32) -> Option<&CommSlot> {
        self.comms.get(ctx as usize / 2)
    }

    /// A communicator was made with context id `ctx`: its numbering starts over (the id may
    /// have served a freed communicator before), it is known by its lowest world rank and size,
    /// and it takes `name` ("" for none).
    pub fn comm_created(&self, ctx: u32, first: u32, size: u32, name: &str) {
        if let Some(c) = self.comm(ctx) {
            c.seq.store(0, Ordering::Relaxed);
            c.shape
                .store(u64::from(first) | u64::from(size) << 32, Ordering::Relaxed);
        }
        self.set_name(ctx, name);
    }

    /// Names the communicator with context id `ctx` ("" removes the name).
    pub fn set_name(&self, ctx: u32, name: &str) {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names.retain(|(c, _)| *c != ctx);
        if !name.is_empty() {
            names.push((ctx, crate::wire::cut(name, MAX_COMM_NAME).to_string()));
        }
    }

    /// The name of the communicator with context id `ctx` ("" if none).
    pub fn name(&self, ctx: u32) -> String {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names
            .iter()
            .find(|(c, _)| *c == ctx)
            .map(|(_, n)| n.clone())
            .unwrap_or_default()
    }

    /// Records the start of an operation.
    pub fn begin(&self, b: &Begin<'_>) -> Handle {
        let comm = self.comm(b.ctx);
        let seq = match comm {
            // Collectives on one communicator are never concurrent (every rank calls them in
            // one order, MPI's rule), so a plain load and store suffice.
            Some(c) if b.collective => {
                let s = c.seq.load(Ordering::Relaxed) + 1;
                c.seq.store(s, Ordering::Relaxed);
                s
            }
            _ => 0,
        };
        let op = code(OPS, b.op);
        if self.slots.is_empty() {
            return Handle::pack(0, b.ctx, seq, op);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let s = &self.slots[(id - 1) as usize & (self.slots.len() - 1)].0;
        s[0].store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        let w1 = u64::from(b.ctx)
            | (b.state as u64) << 32
            | op << 40
            | u64::from(b.dtype) << 48
            | u64::from(b.algo.map_or(0, Algo::code)) << 56;
        s[1].store(w1, Ordering::Relaxed);
        s[2].store(seq, Ordering::Relaxed);
        s[3].store(b.bytes, Ordering::Relaxed);
        s[4].store(
            u64::from(b.peer) | u64::from(b.redop) << 32 | if b.slow { SLOW } else { 0 },
            Ordering::Relaxed,
        );
        s[5].store(if b.slow { now_us() } else { 0 }, Ordering::Relaxed);
        s[6].store(0, Ordering::Relaxed);
        s[7].store(
            comm.map_or(0, |c| c.shape.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        s[0].store(id, Ordering::Release);
        Handle::pack(id, b.ctx, seq, op)
    }

    /// The slot of `h`, if it still holds that operation.
    fn slot(&self, h: Handle) -> Option<&[AtomicU64; 8]> {
        if h.id == 0 || self.slots.is_empty() {
            return None;
        }
        let s = &self.slots[(h.id - 1) as usize & (self.slots.len() - 1)].0;
        (s[0].load(Ordering::Relaxed) == h.id).then_some(s)
    }

    fn set_field(s: &[AtomicU64; 8], shift: u32, v: u64) {
        let w = s[1].load(Ordering::Relaxed);
        s[1].store(w & !(0xff << shift) | v << shift, Ordering::Relaxed);
    }

    /// Changes the state of a running operation (a non-blocking collective being waited for).
    pub fn set_state(&self, h: Handle, state: State) {
        if let Some(s) = self.slot(h) {
            Self::set_field(s, 32, state as u64);
        }
    }

    /// Records the root or peer of an operation.
    pub fn set_peer(&self, h: Handle, peer: u32) {
        if let Some(s) = self.slot(h) {
            let w = s[4].load(Ordering::Relaxed);
            s[4].store(w & !0xffff_ffff | u64::from(peer), Ordering::Relaxed);
        }
    }

    /// Records the algorithm an operation runs.
    pub fn set_algo(&self, h: Handle, algo: Algo) {
        if let Some(s) = self.slot(h) {
            Self::set_field(s, 56, u64::from(algo.code()));
        }
    }

    /// Records that an operation was handed to NCCL: enqueued on `stream` as NCCL's operation
    /// number `seq` on its communicator. The last [`DEVICE_OPS`] are kept.
    pub fn set_device_op(&self, h: Handle, stream: u64, seq: u64) {
        if self.slot(h).is_none() {
            return;
        }
        let mut d = self.device_ops.lock().unwrap_or_else(|p| p.into_inner());
        if d.by_id.insert(h.id, DeviceOp { stream, seq }).is_none() {
            d.order.push_back(h.id);
        }
        while d.order.len() > DEVICE_OPS {
            let old = d.order.pop_front().expect("non-empty");
            d.by_id.remove(&old);
        }
    }

    /// Marks a running operation as waiting past the spin phase (or posted and left running):
    /// it is timed from now, and its end will be.
    pub fn mark_slow(&self, h: Handle) {
        if let Some(s) = self.slot(h)
            && s[4].fetch_or(SLOW, Ordering::Relaxed) & SLOW == 0
        {
            s[5].store(now_us(), Ordering::Relaxed);
        }
    }

    /// Records the end of an operation (timed if it was, or did not end well).
    pub fn end(&self, h: Handle, state: State) {
        if let Some(s) = self.slot(h) {
            if state != State::Done || s[4].load(Ordering::Relaxed) & SLOW != 0 {
                s[6].store(now_us().max(1), Ordering::Relaxed);
            }
            Self::set_field(s, 32, state as u64);
        }
    }

    /// The operations kept, oldest first.
    pub fn snapshot(&self) -> Vec<Record> {
        let mut out: Vec<Record> = Vec::with_capacity(self.slots.len());
        let device = self.device_ops.lock().unwrap_or_else(|p| p.into_inner());
        for slot in self.slots.iter() {
            let s = &slot.0;
            let id = s[0].load(Ordering::Acquire);
            if id == 0 {
                continue;
            }
            let w: [u64; 8] = std::array::from_fn(|i| s[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if s[0].load(Ordering::Relaxed) != id {
                continue; // rewritten while we read it
            }
            let Some(state) = State::from_code((w[1] >> 32) as u8) else {
                continue;
            };
            out.push(Record {
                id,
                ctx: w[1] as u32,
                comm_first: w[7] as u32,
                comm_size: (w[7] >> 32) as u32,
                seq: w[2],
                op: name(OPS, w[1] >> 40 & 0xff),
                dtype: name(DTYPES, w[1] >> 48 & 0xff),
                redop: name(REDOPS, w[4] >> 32 & 0xff),
                algo: Algo::from_code((w[1] >> 56) as u8),
                bytes: w[3],
                peer: w[4] as u32,
                state,
                start_us: w[5],
                end_us: w[6],
                device: device.by_id.get(&id).copied(),
            });
        }
        drop(device);
        out.sort_unstable_by_key(|r| r.id);
        out
    }

    /// This process's dump for the launcher: the most recent operations and the names of its
    /// communicators.
    pub fn dump(&self, rank: u32) -> FlightDump {
        let snap = self.snapshot();
        let skip = snap.len().saturating_sub(MAX_DUMP_RECORDS);
        FlightDump {
            rank,
            host: crate::identity::hostname(),
            pid: std::process::id(),
            now_us: now_us(),
            total: self.next.load(Ordering::Relaxed),
            comms: self.names.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            records: snap[skip..]
                .iter()
                .map(|r| DumpRecord {
                    id: r.id,
                    ctx: r.ctx,
                    comm_first: r.comm_first,
                    comm_size: r.comm_size,
                    seq: r.seq,
                    op: r.op.into(),
                    dtype: r.dtype.into(),
                    redop: r.redop.into(),
                    algo: match r.device {
                        Some(d) => format!("nccl op {} on stream 0x{:x}", d.seq, d.stream),
                        None => r.algo.map_or("", Algo::name).into(),
                    },
                    bytes: r.bytes,
                    peer: r.peer,
                    state: r.state.name().into(),
                    start_us: r.start_us,
                    end_us: r.end_us,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nccl_operation_keeps_its_stream_and_number_and_is_dumped_as_nccl() {
        let r = Recorder::new(4);
        let h = r.begin(&coll(2, "allreduce", Algo::Ring));
        let plain = r.begin(&coll(2, "bcast", Algo::Tree));
        r.set_device_op(h, 0xabc0, 7);
        let snap = r.snapshot();
        assert_eq!(
            snap.iter().map(|x| x.device).collect::<Vec<_>>(),
            vec![
                Some(DeviceOp {
                    stream: 0xabc0,
                    seq: 7
                }),
                None
            ]
        );
        let d = r.dump(0);
        assert_eq!(d.records[0].algo, "nccl op 7 on stream 0xabc0");
        assert_eq!(d.records[1].algo, "tree");
        // A record overwritten in its slot no longer takes its device operation along.
        for _ in 0..4 {
            r.begin(&coll(2, "barrier", Algo::Ring));
        }
        r.set_device_op(plain, 1, 1);
        assert!(r.snapshot().iter().all(|x| x.device.is_none()));
    }

    fn coll(ctx: u32, op: &str, algo: Algo) -> Begin<'_> {
        Begin {
            ctx,
            op,
            dtype: dtype_code("f32"),
            redop: redop_code("sum"),
            algo: Some(algo),
            bytes: 4096,
            peer: NO_PEER,
            state: State::Waiting,
            collective: true,
            slow: false,
        }
    }

    #[test]
    fn the_ring_keeps_the_last_operations_with_per_communicator_numbers() {
        let r = Recorder::new(4);
        r.comm_created(0, 0, 8, "world");
        r.comm_created(4, 4, 4, "");
        r.set_name(4, "tp");
        let mut hs = Vec::new();
        for i in 0..6u32 {
            let ctx = if i % 2 == 0 { 0 } else { 4 };
            let h = r.begin(&coll(ctx, "allreduce", Algo::Ring));
            hs.push(h);
            if i == 2 {
                r.mark_slow(h);
            }
            if i < 5 {
                r.end(h, State::Done);
            }
        }
        // Per-communicator numbers: world 1,2,3; tp 1,2,3.
        assert_eq!(
            hs.iter().map(|h| (h.ctx(), h.seq())).collect::<Vec<_>>(),
            vec![(0, 1), (4, 1), (0, 2), (4, 2), (0, 3), (4, 3)]
        );
        let snap = r.snapshot();
        assert_eq!(
            snap.iter().map(|x| x.id).collect::<Vec<_>>(),
            vec![3, 4, 5, 6]
        );
        let last = snap.last().unwrap();
        assert_eq!(
            (last.op, last.algo, last.dtype, last.redop, last.state),
            ("allreduce", Some(Algo::Ring), "f32", "sum", State::Waiting)
        );
        assert_eq!((last.comm_first, last.comm_size, last.end_us), (4, 4, 0));
        assert!(snap[0].state == State::Done && snap[0].end_us > 0); // marked slow
        // An operation whose slot was reused is not touched by its late end.
        r.end(hs[0], State::Failed);
        assert!(r.snapshot().iter().all(|x| x.state != State::Failed));
        // Fast and done: not timed; slow: timed.
        let t = Recorder::new(2);
        let (fast, slow) = (
            t.begin(&coll(0, "bcast", Algo::Tree)),
            t.begin(&coll(0, "bcast", Algo::Tree)),
        );
        t.mark_slow(slow);
        t.end(fast, State::Done);
        t.end(slow, State::Done);
        let snap = t.snapshot();
        assert_eq!(snap[0].end_us, 0);
        assert!(snap[1].end_us > 0 && snap[1].end_us >= snap[1].start_us);
        let d = r.dump(3);
        assert_eq!((d.rank, d.total, d.records.len()), (3, 6, 4));
        assert!(d.comms.contains(&(4, "tp".to_string())));
        assert_eq!(r.name(4), "tp");
        // A new communicator on a freed context id starts over.
        r.comm_created(4, 0, 2, "");
        assert_eq!(r.begin(&coll(4, "bcast", Algo::Tree)).seq(), 1);
        assert_eq!(r.name(4), "");
    }

    #[test]
    fn a_recorder_of_size_zero_records_nothing_but_numbers_collectives() {
        let r = Recorder::new(0);
        r.comm_created(2, 0, 2, "x");
        let a = r.begin(&coll(2, "barrier", Algo::Dissemination));
        let b = r.begin(&coll(2, "barrier", Algo::Dissemination));
        assert_eq!((a.id, a.seq(), b.seq()), (0, 1, 2));
        assert_eq!(b.op_name(), "barrier");
        r.end(b, State::Done);
        assert!(r.snapshot().is_empty());
    }

    #[test]
    fn a_reader_beside_writers_sees_only_whole_records() {
        // One writer per slot at a time is the seqlock's premise (two writers on one slot need
        // one of them lapped by the whole ring mid-write, and cost one mixed record).
        let r = std::sync::Arc::new(Recorder::new(64));
        let writers: Vec<_> = (1..2u32)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..50_000u64 {
                        let h = r.begin(&Begin {
                            ctx: 2 * t,
                            op: "send",
                            dtype: 0,
                            redop: 0,
                            algo: None,
                            bytes: u64::from(t) << 32 | i,
                            peer: t,
                            state: State::Waiting,
                            collective: false,
                            slow: true,
                        });
                        r.end(h, State::Done);
                    }
                })
            })
            .collect();
        let check = |seen: &mut usize| {
            for x in r.snapshot() {
                // Fields written together belong together.
                assert_eq!(x.ctx / 2, (x.bytes >> 32) as u32);
                assert_eq!(x.peer, x.ctx / 2);
                assert_eq!(x.op, "send");
                *seen += 1;
            }
        };
        let mut seen = 0;
        // On a loaded machine the writer may finish before this thread runs at all: the
        // snapshots during the writes are the point, the one after them a floor.
        while writers.iter().any(|w| !w.is_finished()) {
            check(&mut seen);
        }
        for w in writers {
            w.join().unwrap();
        }
        check(&mut seen);
        assert!(seen >= 64);
        assert_eq!(r.snapshot().len(), 64);
    }
}
