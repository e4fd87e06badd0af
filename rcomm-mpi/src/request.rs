//! Requests of non-blocking operations (rsmpi's `mpi::request`).
//!
//! A request runs on rcomm's owned-buffer requests; data for a borrowed receive buffer lands in
//! the request's own buffer and is copied (or unpacked) into the borrowed one when the request
//! completes. The scope guarantees the borrowed buffer outlives the request.

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{RefUnwindSafe, UnwindSafe};

use crate::check;
use crate::datatype::Dst;
use crate::status::Status;

/// One operation in flight.
pub(crate) trait Op {
    /// Advances; `Some` once complete.
    fn test(&mut self) -> Option<rcomm::Status>;
    /// Blocks until complete.
    fn wait(&mut self) -> rcomm::Status;
    /// Cancels when possible (a receive not yet matched).
    fn cancel(&mut self) {}
}

pub(crate) type Pending<'a> = Box<dyn Op + std::marker::Send + 'a>;

pub(crate) fn empty_status() -> rcomm::Status {
    rcomm::Status {
        source: 0,
        tag: 0,
        bytes: 0,
    }
}

/// An operation complete when started.
pub(crate) struct Done(pub(crate) rcomm::Status);

impl Op for Done {
    fn test(&mut self) -> Option<rcomm::Status> {
        Some(self.0)
    }
    fn wait(&mut self) -> rcomm::Status {
        self.0
    }
}

/// A send whose request owns a copy of the data.
pub(crate) struct Send(
    pub(crate) Option<rcomm::Request<u8>>,
    pub(crate) Option<rcomm::Status>,
);

impl Op for Send {
    fn test(&mut self) -> Option<rcomm::Status> {
        if self.1.is_none() && self.0.as_mut().is_some_and(|r| r.test()) {
            self.1 = Some(check(self.0.take().expect("live request").wait()).1);
        }
        self.1
    }
    fn wait(&mut self) -> rcomm::Status {
        if let Some(r) = self.0.take() {
            self.1 = Some(check(r.wait()).1);
        }
        self.1.expect("a finished send has a status")
    }
    fn cancel(&mut self) {
        // rcomm withdraws a send no receive matched yet (its wait then returns an empty
        // status); a matched one, or an eager send that went out when it started, completes
        // as usual, as MPI allows.
        if let Some(r) = self.0.as_mut() {
            r.cancel();
        }
    }
}

/// A receive into an owned buffer, unpacked into `dst` on completion.
pub(crate) struct Recv {
    pub(crate) req: Option<rcomm::Request<u8>>,
    pub(crate) dst: Dst,
    pub(crate) done: Option<rcomm::Status>,
}

impl Recv {
    fn finish(&mut self, r: rcomm::Request<u8>) -> rcomm::Status {
        let (buf, st) = check(r.wait());
        self.dst.unpack_at(0, &buf[..st.bytes.min(buf.len())]);
        self.done = Some(st);
        st
    }
}

impl Op for Recv {
    fn test(&mut self) -> Option<rcomm::Status> {
        if self.done.is_none() && self.req.as_mut().is_some_and(|r| r.test()) {
            let r = self.req.take().expect("live request");
            self.finish(r);
        }
        self.done
    }
    fn wait(&mut self) -> rcomm::Status {
        if let Some(r) = self.req.take() {
            return self.finish(r);
        }
        self.done.unwrap_or_else(empty_status)
    }
    fn cancel(&mut self) {
        if let Some(r) = self.req.as_mut()
            && r.cancel()
        {
            // Taken back before any message matched: the buffer is left as it was.
            self.req = None;
            self.done = Some(empty_status());
        }
    }
}

/// A non-blocking collective; `finish` stores its result.
pub(crate) struct Coll<'a, T: bytemuck::Pod + std::marker::Send> {
    pub(crate) req: Option<rcomm::CollRequest<T>>,
    pub(crate) finish: Option<Box<dyn FnOnce(Vec<T>) + std::marker::Send + 'a>>,
}

impl<'a, T: bytemuck::Pod + std::marker::Send> Coll<'a, T> {
    pub(crate) fn boxed(
        req: rcomm::CollRequest<T>,
        finish: impl FnOnce(Vec<T>) + std::marker::Send + 'a,
    ) -> Pending<'a>
    where
        T: 'a,
    {
        Box::new(Coll {
            req: Some(req),
            finish: Some(Box::new(finish)),
        })
    }

    fn complete(&mut self) {
        if let Some(r) = self.req.take() {
            let v = check(r.wait());
            if let Some(f) = self.finish.take() {
                f(v);
            }
        }
    }
}

impl<T: bytemuck::Pod + std::marker::Send> Op for Coll<'_, T> {
    fn test(&mut self) -> Option<rcomm::Status> {
        if let Some(r) = self.req.as_mut() {
            if !check(r.test()) {
                return None;
            }
            self.complete();
        }
        Some(empty_status())
    }
    fn wait(&mut self) -> rcomm::Status {
        self.complete();
        empty_status()
    }
}

/// What a request's lifetime is bound to.
///
/// # Safety
/// A scope must not end while a request registered with it is live.
pub unsafe trait Scope<'a> {
    /// Registers a new request.
    fn register(&self);
    /// Unregisters a completed request.
    ///
    /// # Safety
    /// Only for a request registered before.
    unsafe fn unregister(&self);
}

/// The scope of requests that borrow nothing shorter than `'static`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StaticScope;

unsafe impl Scope<'static> for StaticScope {
    fn register(&self) {}
    unsafe fn unregister(&self) {}
}

/// A scope made by [`scope`]: requests started in it borrow buffers that outlive it.
#[derive(Debug)]
pub struct LocalScope<'a> {
    live: Cell<usize>,
    _life: PhantomData<Cell<&'a ()>>,
}

impl Drop for LocalScope<'_> {
    fn drop(&mut self) {
        if self.live.get() != 0 && !std::thread::panicking() {
            crate::fail(&format!(
                "a request scope ended with {} requests not completed",
                self.live.get()
            ));
        }
    }
}

unsafe impl<'a> Scope<'a> for &LocalScope<'a> {
    fn register(&self) {
        self.live.set(self.live.get() + 1);
    }
    unsafe fn unregister(&self) {
        self.live.set(self.live.get() - 1);
    }
}

/// Runs `f` with a scope for requests that borrow local buffers.
pub fn scope<'a, F, R>(f: F) -> R
where
    F: FnOnce(&LocalScope<'a>) -> R,
{
    let s = LocalScope {
        live: Cell::new(0),
        _life: PhantomData,
    };
    f(&s)
}

/// Runs `f` with a scope and a collection for up to about `reserve` requests.
pub fn multiple_scope<'a, F, R, D: ?Sized + 'a>(reserve: usize, f: F) -> R
where
    F: FnOnce(&LocalScope<'a>, &mut RequestCollection<'a, D>) -> R,
{
    let mut coll = RequestCollection::new(reserve);
    scope(|s| f(s, &mut coll))
}

/// A non-blocking operation in flight, borrowing `D` for `'a`.
#[must_use]
pub struct Request<'a, D: ?Sized, S: Scope<'a> = StaticScope> {
    op: Option<Pending<'a>>,
    data: &'a D,
    scope: S,
    cancelled: Cell<bool>,
}

// As rsmpi's (whose requests hold only a handle and the borrow): a request may be kept across
// `catch_unwind`. A panic leaves the pending operation and the cancelled flag as they were, and
// both stay valid to wait on or drop.
impl<'a, D: ?Sized + RefUnwindSafe, S: Scope<'a> + UnwindSafe> UnwindSafe for Request<'a, D, S> {}
impl<'a, D: ?Sized + RefUnwindSafe, S: Scope<'a> + UnwindSafe> UnwindSafe for WaitGuard<'a, D, S> {}
impl<'a, D: ?Sized + RefUnwindSafe, S: Scope<'a> + UnwindSafe> UnwindSafe
    for CancelGuard<'a, D, S>
{
}
impl<'a, D: ?Sized + RefUnwindSafe> UnwindSafe for RequestCollection<'a, D> {}
impl<'a, D: ?Sized + RefUnwindSafe> RefUnwindSafe for RequestCollection<'a, D> {}

impl<'a, D: ?Sized, S: Scope<'a>> std::fmt::Debug for Request<'a, D, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Request")
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Request<'a, D, S> {
    pub(crate) fn new(op: Pending<'a>, data: &'a D, scope: S) -> Self {
        scope.register();
        Request {
            op: Some(op),
            data,
            scope,
            cancelled: Cell::new(false),
        }
    }

    fn take(mut self) -> (Pending<'a>, bool) {
        let op = self
            .op
            .take()
            .expect("a request has its operation until completed");
        unsafe { self.scope.unregister() };
        (op, self.cancelled.get())
    }

    /// Waits; returns the status.
    pub fn wait(self) -> Status {
        let (mut op, c) = self.take();
        if c {
            op.cancel();
        }
        Status(op.wait())
    }

    /// Waits; returns the borrowed data.
    pub fn wait_for_data(self) -> &'a D {
        let d = self.data;
        self.wait();
        d
    }

    /// Waits, ignoring the status.
    pub fn wait_without_status(self) {
        self.wait();
    }

    /// The status if complete, else the request back.
    pub fn test(mut self) -> Result<Status, Self> {
        match self.op.as_mut().expect("live request").test() {
            Some(st) => {
                self.take();
                Ok(Status(st))
            }
            None => Err(self),
        }
    }

    /// The status and data if complete, else the request back.
    pub fn test_with_data(self) -> Result<(Status, &'a D), Self> {
        let d = self.data;
        self.test().map(|s| (s, d))
    }

    /// Asks to cancel (`MPI_Cancel`), carried out when the request is next waited for or
    /// added to a collection: a receive not yet matched is taken back (its buffer untouched);
    /// a matched receive and every send complete as usual (rcomm takes back no message).
    pub fn cancel(&self) {
        self.cancelled.set(true);
    }

    /// Moves the request into a scope that ends sooner.
    pub fn shrink_scope_to<'b, S2>(mut self, scope: S2) -> Request<'b, D, S2>
    where
        'a: 'b,
        S2: Scope<'b>,
    {
        let op = self.op.take().expect("live request");
        unsafe { self.scope.unregister() };
        Request::new(op, self.data, scope)
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Drop for Request<'a, D, S> {
    fn drop(&mut self) {
        if let Some(mut op) = self.op.take() {
            // rsmpi aborts here; waiting keeps the borrowed buffer safe and the job alive.
            if !std::thread::panicking() {
                op.wait();
            }
            unsafe { self.scope.unregister() };
        }
    }
}

/// Waits for one of `requests`; removes it and returns its index and status (`None` when
/// `requests` is empty).
pub fn wait_any<'a, D, S: Scope<'a>>(
    requests: &mut Vec<Request<'a, D, S>>,
) -> Option<(usize, Status)> {
    if requests.is_empty() {
        return None;
    }
    let mut spins = 0u32;
    loop {
        for i in 0..requests.len() {
            if let Some(st) = requests[i].op.as_mut().expect("live request").test() {
                let r = requests.remove(i);
                r.take();
                return Some((i, Status(st)));
            }
        }
        backoff(&mut spins);
    }
}

pub(crate) fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins > 16 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Waits for the request when dropped.
#[derive(Debug)]
pub struct WaitGuard<'a, D: ?Sized, S: Scope<'a> = StaticScope>(Option<Request<'a, D, S>>);

impl<'a, D: ?Sized, S: Scope<'a>> Drop for WaitGuard<'a, D, S> {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.wait();
        }
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<WaitGuard<'a, D, S>> for Request<'a, D, S> {
    fn from(mut g: WaitGuard<'a, D, S>) -> Self {
        g.0.take().expect("a guard holds its request")
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(r: Request<'a, D, S>) -> Self {
        WaitGuard(Some(r))
    }
}

/// Cancels, then waits for, the request when dropped.
#[derive(Debug)]
pub struct CancelGuard<'a, D: ?Sized, S: Scope<'a> = StaticScope>(WaitGuard<'a, D, S>);

impl<'a, D: ?Sized, S: Scope<'a>> Drop for CancelGuard<'a, D, S> {
    fn drop(&mut self) {
        if let Some(r) = &self.0.0 {
            r.cancel();
        }
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<CancelGuard<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(mut g: CancelGuard<'a, D, S>) -> Self {
        WaitGuard(g.0.0.take())
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<WaitGuard<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(g: WaitGuard<'a, D, S>) -> Self {
        CancelGuard(g)
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(r: Request<'a, D, S>) -> Self {
        CancelGuard(WaitGuard::from(r))
    }
}

struct Slot<'a, D: ?Sized> {
    op: Pending<'a>,
    data: &'a D,
    done: Option<rcomm::Status>,
}

/// A set of requests over the same data type, completed by index (`MPI_Waitany`, `_some`,
/// `_all`, `MPI_Testany`, ...).
pub struct RequestCollection<'a, D: ?Sized> {
    slots: Vec<Option<Slot<'a, D>>>,
    incomplete: usize,
}

// SAFETY: a shared `&RequestCollection` reads only the `incomplete` count; the pending
// operations (which need not be `Sync`) are reached through `&mut self` alone, so sharing the
// collection between threads shares no operation. The borrowed data is shared, hence `D: Sync`
// (rsmpi's bound).
unsafe impl<'a, D: ?Sized + Sync> Sync for RequestCollection<'a, D> {}

impl<'a, D: ?Sized> std::fmt::Debug for RequestCollection<'a, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestCollection")
            .field("incomplete", &self.incomplete)
            .finish()
    }
}

impl<'a, D: ?Sized> RequestCollection<'a, D> {
    fn new(reserve: usize) -> Self {
        RequestCollection {
            slots: Vec::with_capacity(reserve),
            incomplete: 0,
        }
    }

    /// Requests not yet completed.
    pub fn incomplete(&self) -> usize {
        self.incomplete
    }

    /// Adds a request; returns its index.
    pub fn add<S: Scope<'a>>(&mut self, req: Request<'a, D, S>) -> usize {
        let data = req.data;
        let (op, cancelled) = req.take();
        let mut op = op;
        if cancelled {
            op.cancel();
        }
        self.slots.push(Some(Slot {
            op,
            data,
            done: None,
        }));
        self.incomplete += 1;
        self.slots.len() - 1
    }

    fn poll(&mut self, i: usize) -> bool {
        match &mut self.slots[i] {
            Some(s) => {
                if s.done.is_none() {
                    s.done = s.op.test();
                }
                s.done.is_some()
            }
            None => false,
        }
    }

    fn collect(&mut self, i: usize) -> (usize, Status, &'a D) {
        let s = self.slots[i].take().expect("a completed slot");
        self.incomplete -= 1;
        (i, Status(s.done.expect("completed")), s.data)
    }

    /// Waits for one request; `None` when none is left.
    pub fn wait_any(&mut self) -> Option<(usize, Status, &'a D)> {
        if self.incomplete == 0 {
            return None;
        }
        let mut spins = 0;
        loop {
            if let Some(r) = self.test_any() {
                return Some(r);
            }
            backoff(&mut spins);
        }
    }

    /// Waits for at least one request; `result` gets every one completed.
    pub fn wait_some(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        result.clear();
        if self.incomplete == 0 {
            return;
        }
        let mut spins = 0;
        loop {
            self.test_some(result);
            if !result.is_empty() {
                return;
            }
            backoff(&mut spins);
        }
    }

    /// Waits for every request; `result` gets them all.
    pub fn wait_all(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        result.clear();
        for i in 0..self.slots.len() {
            if let Some(s) = &mut self.slots[i] {
                if s.done.is_none() {
                    s.done = Some(s.op.wait());
                }
                result.push(self.collect(i));
            }
        }
    }

    /// One completed request, if any.
    pub fn test_any(&mut self) -> Option<(usize, Status, &'a D)> {
        for i in 0..self.slots.len() {
            if self.poll(i) {
                return Some(self.collect(i));
            }
        }
        None
    }

    /// Every completed request into `result` (cleared first).
    pub fn test_some(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        result.clear();
        for i in 0..self.slots.len() {
            if self.poll(i) {
                result.push(self.collect(i));
            }
        }
    }

    /// Whether every request is complete; if so `result` gets them all, else nothing is
    /// taken (as `MPI_Testall`).
    pub fn test_all(&mut self, result: &mut Vec<(usize, Status, &'a D)>) -> bool {
        result.clear();
        let mut all = true;
        for i in 0..self.slots.len() {
            if self.slots[i].is_some() && !self.poll(i) {
                all = false;
            }
        }
        if all {
            for i in 0..self.slots.len() {
                if self.slots[i].is_some() {
                    result.push(self.collect(i));
                }
            }
        }
        all
    }
}

impl<D: ?Sized> Drop for RequestCollection<'_, D> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        for s in self.slots.iter_mut().flatten() {
            if s.done.is_none() {
                s.op.wait();
            }
        }
    }
}
