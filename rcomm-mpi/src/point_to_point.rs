//! Point-to-point communication (rsmpi's `mpi::point_to_point`).

use std::mem::MaybeUninit;

use rcomm::Tag as CoreTag;

use crate::datatype::{Buffer, BufferMut, Dst, Equivalence, UncommittedDatatype, dst_of, src_of};
use crate::request::{self, Pending, Request, Scope};
use crate::topology::{AnyProcess, AsHandle, CommHandle, Process, Rank};
use crate::{Tag, check, fail};

pub use crate::status::Status;

fn tag_sel(tag: Tag) -> CoreTag {
    if tag < 0 { CoreTag::Any } else { CoreTag(tag) }
}

fn send_tag(tag: Tag) -> CoreTag {
    if tag < 0 {
        fail(&format!("send with negative tag {tag}"));
    }
    CoreTag(tag)
}

/// Receives one message into `d` (straight into memory when contiguous).
fn recv_dst(h: &CommHandle, src: rcomm::Source, tag: Tag, d: &mut Dst) -> Status {
    let c = h.comm();
    if !d.dt.core.is_contiguous() {
        // rcomm unpacks straight out of its shared-memory ring when the message is there.
        // SAFETY: `d` is the buffer's layout (`dst_of`), writable and borrowed by this call.
        let st = unsafe { c.recv_dt_raw(d.ptr, d.count, &d.dt.core, src, tag_sel(tag)) };
        return Status(check(st));
    }
    Status(d.with_bytes(|b| check(c.recv(b, src, tag_sel(tag)))))
}

/// Receives a message of unknown size as a vector of `Msg`.
fn recv_vec<Msg: Equivalence>(m: rcomm::Message) -> (Vec<Msg>, Status) {
    let (bytes, st) = check(m.recv_vec::<u8>());
    (bytes_to_vec(&bytes), Status(st))
}

fn bytes_to_vec<Msg: Equivalence>(bytes: &[u8]) -> Vec<Msg> {
    let dt = Msg::equivalent_datatype().dt().clone();
    let n = dt
        .core
        .count_in(bytes.len())
        .unwrap_or(bytes.len() / dt.size().max(1));
    let mut v: Vec<Msg> = Vec::with_capacity(n);
    let d = Dst {
        ptr: v.as_mut_ptr().cast(),
        count: n,
        dt,
    };
    d.unpack_at(0, &bytes[..d.packed_len()]);
    // The datatype covers every byte a value needs (Equivalence's contract).
    unsafe { v.set_len(n) };
    v
}

fn recv_value<Msg: Equivalence>(h: &CommHandle, src: rcomm::Source, tag: Tag) -> (Msg, Status) {
    let mut x = MaybeUninit::<Msg>::zeroed();
    let mut d = Dst {
        ptr: x.as_mut_ptr().cast(),
        count: 1,
        dt: Msg::equivalent_datatype().dt().clone(),
    };
    let st = recv_dst(h, src, tag, &mut d);
    (unsafe { x.assume_init() }, st)
}

/// Starts a receive into `d`; the data is unpacked into it on completion.
fn irecv_dst<'a>(h: &CommHandle, src: rcomm::Source, tag: Tag, d: Dst) -> Pending<'a> {
    let buf = vec![0u8; d.packed_len()];
    let req = check(h.comm().irecv(buf, src, tag_sel(tag)));
    Box::new(request::Recv {
        req: Some(req),
        dst: d,
        done: None,
    })
}

/// Something to receive from: a process or any process.
pub trait Source: AsHandle {
    /// The source's rank (`MPI_ANY_SOURCE` for any process).
    fn source_rank(&self) -> Rank;

    /// rcomm's selector.
    #[doc(hidden)]
    fn selector(&self) -> rcomm::Source {
        let r = self.source_rank();
        if r < 0 {
            rcomm::Source::Any
        } else {
            rcomm::Source::Rank(r as u32)
        }
    }

    /// Waits for a message with `tag` (negative: any) and returns its status.
    fn probe_with_tag(&self, tag: Tag) -> Status {
        Status(check(
            self.as_handle().comm().probe(self.selector(), tag_sel(tag)),
        ))
    }

    /// Waits for any message and returns its status.
    fn probe(&self) -> Status {
        self.probe_with_tag(-1)
    }

    /// Waits for a message with `tag` and takes it off the queue (`MPI_Mprobe`).
    fn matched_probe_with_tag(&self, tag: Tag) -> (Message, Status) {
        let m = check(
            self.as_handle()
                .comm()
                .mprobe(self.selector(), tag_sel(tag)),
        );
        let st = Status(m.status());
        (Message(Some(m)), st)
    }

    /// Waits for any message and takes it off the queue.
    fn matched_probe(&self) -> (Message, Status) {
        self.matched_probe_with_tag(-1)
    }

    /// Receives one value with `tag`.
    fn receive_with_tag<Msg: Equivalence>(&self, tag: Tag) -> (Msg, Status)
    where
        Self: Sized,
    {
        recv_value(self.as_handle(), self.selector(), tag)
    }

    /// Receives one value.
    fn receive<Msg: Equivalence>(&self) -> (Msg, Status)
    where
        Self: Sized,
    {
        self.receive_with_tag(-1)
    }

    /// Receives into `buf` with `tag`.
    fn receive_into_with_tag<Buf: ?Sized + BufferMut>(&self, buf: &mut Buf, tag: Tag) -> Status
    where
        Self: Sized,
    {
        recv_dst(self.as_handle(), self.selector(), tag, &mut dst_of(buf))
    }

    /// Receives into `buf`.
    fn receive_into<Buf: ?Sized + BufferMut>(&self, buf: &mut Buf) -> Status
    where
        Self: Sized,
    {
        self.receive_into_with_tag(buf, -1)
    }

    /// Receives a message of any length with `tag`.
    fn receive_vec_with_tag<Msg: Equivalence>(&self, tag: Tag) -> (Vec<Msg>, Status)
    where
        Self: Sized,
    {
        let (m, _) = self.matched_probe_with_tag(tag);
        m.matched_receive_vec()
    }

    /// Receives a message of any length.
    fn receive_vec<Msg: Equivalence>(&self) -> (Vec<Msg>, Status)
    where
        Self: Sized,
    {
        self.receive_vec_with_tag(-1)
    }

    /// Starts receiving into `buf` with `tag`.
    fn immediate_receive_into_with_tag<'a, Sc, Buf: ?Sized + 'a + BufferMut>(
        &self,
        scope: Sc,
        buf: &'a mut Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        let op = irecv_dst(self.as_handle(), self.selector(), tag, dst_of(buf));
        Request::new(op, buf, scope)
    }

    /// Starts receiving into `buf`.
    fn immediate_receive_into<'a, Sc, Buf: ?Sized + 'a + BufferMut>(
        &self,
        scope: Sc,
        buf: &'a mut Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        self.immediate_receive_into_with_tag(scope, buf, -1)
    }

    /// Starts receiving one value with `tag`; the future owns the value.
    fn immediate_receive_with_tag<Msg: Equivalence>(&self, tag: Tag) -> ReceiveFuture<Msg>
    where
        Self: Sized,
    {
        let dt = Msg::equivalent_datatype().dt().clone();
        let buf = vec![0u8; dt.packed(1)];
        let req = check(
            self.as_handle()
                .comm()
                .irecv(buf, self.selector(), tag_sel(tag)),
        );
        ReceiveFuture {
            req: Some(req),
            _t: std::marker::PhantomData,
        }
    }

    /// Starts receiving one value.
    fn immediate_receive<Msg: Equivalence>(&self) -> ReceiveFuture<Msg>
    where
        Self: Sized,
    {
        self.immediate_receive_with_tag(-1)
    }

    /// The status of a message with `tag` if one is waiting.
    fn immediate_probe_with_tag(&self, tag: Tag) -> Option<Status> {
        check(
            self.as_handle()
                .comm()
                .iprobe(self.selector(), tag_sel(tag)),
        )
        .map(Status)
    }

    /// The status of any waiting message.
    fn immediate_probe(&self) -> Option<Status> {
        self.immediate_probe_with_tag(-1)
    }

    /// Takes a waiting message with `tag` off the queue, if there is one.
    fn immediate_matched_probe_with_tag(&self, tag: Tag) -> Option<(Message, Status)> {
        check(
            self.as_handle()
                .comm()
                .improbe(self.selector(), tag_sel(tag)),
        )
        .map(|m| {
            let st = Status(m.status());
            (Message(Some(m)), st)
        })
    }

    /// Takes any waiting message off the queue, if there is one.
    fn immediate_matched_probe(&self) -> Option<(Message, Status)> {
        self.immediate_matched_probe_with_tag(-1)
    }
}

impl Source for AnyProcess<'_> {
    fn source_rank(&self) -> Rank {
        crate::ffi::MPI_ANY_SOURCE
    }
}

impl Source for Process<'_> {
    fn source_rank(&self) -> Rank {
        self.rank
    }
}

/// A message taken off the queue by a matched probe (`MPI_Message`).
#[derive(Debug)]
pub struct Message(Option<rcomm::Message>);

impl Message {
    /// Whether the probe was of the null process (`MPI_MESSAGE_NO_PROC`): the facade has no
    /// null process, so never.
    pub fn is_no_proc(&self) -> bool {
        false
    }

    fn take(&mut self) -> rcomm::Message {
        self.0.take().expect("a message is received once")
    }

    /// Receives the message as one value.
    pub fn matched_receive<Msg: Equivalence>(mut self) -> (Msg, Status) {
        let mut x = MaybeUninit::<Msg>::zeroed();
        let mut d = Dst {
            ptr: x.as_mut_ptr().cast(),
            count: 1,
            dt: Msg::equivalent_datatype().dt().clone(),
        };
        let m = self.take();
        let st = d.with_bytes(|b| check(m.recv_into(b)));
        (unsafe { x.assume_init() }, Status(st))
    }

    /// Receives the message into `buf`.
    pub fn matched_receive_into<Buf: ?Sized + BufferMut>(mut self, buf: &mut Buf) -> Status {
        let m = self.take();
        Status(dst_of(buf).with_bytes(|b| check(m.recv_into(b))))
    }

    /// Receives the message into `buf` as a request. The message is already here, so rcomm
    /// receives it at once and the request is complete.
    pub fn immediate_matched_receive_into<'a, Sc, Buf: ?Sized + 'a + BufferMut>(
        self,
        scope: Sc,
        buf: &'a mut Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Sc: Scope<'a>,
    {
        let st = self.matched_receive_into(buf);
        Request::new(Box::new(request::Done(st.0)), buf, scope)
    }

    /// Receives the message as a vector.
    pub fn matched_receive_vec<Msg: Equivalence>(mut self) -> (Vec<Msg>, Status) {
        recv_vec(self.take())
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if self.0.is_some() && !std::thread::panicking() {
            crate::fail(&"a matched message was dropped without being received");
        }
    }
}

/// `matched_receive_vec` on the pair a matched probe returns.
pub trait MatchedReceiveVec {
    /// Receives the message as a vector.
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status);
}

impl MatchedReceiveVec for (Message, Status) {
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status) {
        self.0.matched_receive_vec()
    }
}

/// A value being received (`immediate_receive`).
#[derive(Debug)]
#[must_use]
pub struct ReceiveFuture<T> {
    req: Option<rcomm::Request<u8>>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Equivalence> ReceiveFuture<T> {
    fn value(bytes: &[u8]) -> T {
        let mut x = MaybeUninit::<T>::zeroed();
        let d = Dst {
            ptr: x.as_mut_ptr().cast(),
            count: 1,
            dt: T::equivalent_datatype().dt().clone(),
        };
        d.unpack_at(0, bytes);
        unsafe { x.assume_init() }
    }

    /// Waits for the value.
    pub fn get(mut self) -> (T, Status) {
        let (b, st) = check(self.req.take().expect("live future").wait());
        (Self::value(&b[..st.bytes.min(b.len())]), Status(st))
    }

    /// The value if it has arrived, else the future back.
    pub fn r#try(mut self) -> Result<(T, Status), Self> {
        if self.req.as_mut().expect("live future").test() {
            Ok(self.get())
        } else {
            Err(self)
        }
    }
}

/// Something to send to: a process.
pub trait Destination: AsHandle {
    /// The destination's rank.
    fn destination_rank(&self) -> Rank;

    /// Sends `buf` with `tag` (`MPI_Send`).
    fn send_with_tag<Buf: ?Sized + Buffer>(&self, buf: &Buf, tag: Tag)
    where
        Self: Sized,
    {
        let s = src_of(buf);
        let (c, dest) = (self.as_handle().comm(), self.destination_rank() as u32);
        if !s.dt.core.is_contiguous() {
            // rcomm gathers the layout straight into its shared-memory ring when it can.
            // SAFETY: `s` is the buffer's layout (`src_of`), readable during the call.
            check(unsafe { c.send_dt_raw(s.ptr, s.count, &s.dt.core, dest, send_tag(tag)) });
            return;
        }
        check(c.send(&s.bytes(), dest, send_tag(tag)))
    }

    /// Sends `buf` with tag 0.
    fn send<Buf: ?Sized + Buffer>(&self, buf: &Buf)
    where
        Self: Sized,
    {
        self.send_with_tag(buf, 0)
    }

    /// Sends through the attached buffer (`MPI_Bsend`, rcomm's `bsend`): returns at once,
    /// whether or not the receive is posted; an error (abort) when the buffer attached with
    /// [`Universe::set_buffer_size`](crate::environment::Universe::set_buffer_size) is full or
    /// none is attached.
    fn buffered_send_with_tag<Buf: ?Sized + Buffer>(&self, buf: &Buf, tag: Tag)
    where
        Self: Sized,
    {
        let s = src_of(buf);
        check(self.as_handle().comm().bsend(
            &s.bytes(),
            self.destination_rank() as u32,
            send_tag(tag),
        ))
    }

    /// Buffered send with tag 0.
    fn buffered_send<Buf: ?Sized + Buffer>(&self, buf: &Buf)
    where
        Self: Sized,
    {
        self.buffered_send_with_tag(buf, 0)
    }

    /// Sends and returns once the receiver has matched it (`MPI_Ssend`).
    fn synchronous_send_with_tag<Buf: ?Sized + Buffer>(&self, buf: &Buf, tag: Tag)
    where
        Self: Sized,
    {
        let s = src_of(buf);
        check(self.as_handle().comm().ssend(
            &s.bytes(),
            self.destination_rank() as u32,
            send_tag(tag),
        ))
    }

    /// Synchronous send with tag 0.
    fn synchronous_send<Buf: ?Sized + Buffer>(&self, buf: &Buf)
    where
        Self: Sized,
    {
        self.synchronous_send_with_tag(buf, 0)
    }

    /// Ready send (`MPI_Rsend`): a standard send in rcomm, which is correct whenever a ready
    /// send is.
    ///
    /// # Safety
    /// As rsmpi: the matching receive must have been posted.
    unsafe fn ready_send_with_tag<Buf: ?Sized + Buffer>(&self, buf: &Buf, tag: Tag)
    where
        Self: Sized,
    {
        let s = src_of(buf);
        check(self.as_handle().comm().rsend(
            &s.bytes(),
            self.destination_rank() as u32,
            send_tag(tag),
        ))
    }

    /// Ready send with tag 0.
    ///
    /// # Safety
    /// As rsmpi: the matching receive must have been posted.
    unsafe fn ready_send<Buf: ?Sized + Buffer>(&self, buf: &Buf)
    where
        Self: Sized,
    {
        unsafe { self.ready_send_with_tag(buf, 0) }
    }

    /// Starts sending `buf` with `tag` (`MPI_Isend`).
    fn immediate_send_with_tag<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        let s = src_of(buf);
        let req = check(self.as_handle().comm().isend(
            s.bytes().into_owned(),
            self.destination_rank() as u32,
            send_tag(tag),
        ));
        Request::new(Box::new(request::Send(Some(req), None)), buf, scope)
    }

    /// Starts sending `buf` with tag 0.
    fn immediate_send<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        self.immediate_send_with_tag(scope, buf, 0)
    }

    /// Starts a buffered send (`MPI_Ibsend`, rcomm's `ibsend`: complete at once).
    fn immediate_buffered_send_with_tag<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        let s = src_of(buf);
        let req = check(self.as_handle().comm().ibsend(
            s.bytes().into_owned(),
            self.destination_rank() as u32,
            send_tag(tag),
        ));
        Request::new(Box::new(request::Send(Some(req), None)), buf, scope)
    }

    /// Starts a buffered send with tag 0.
    fn immediate_buffered_send<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        self.immediate_buffered_send_with_tag(scope, buf, 0)
    }

    /// Starts a synchronous send (`MPI_Issend`): complete once the receiver matched it.
    fn immediate_synchronous_send_with_tag<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        let s = src_of(buf);
        let req = check(self.as_handle().comm().issend(
            s.bytes().into_owned(),
            self.destination_rank() as u32,
            send_tag(tag),
        ));
        Request::new(Box::new(request::Send(Some(req), None)), buf, scope)
    }

    /// Starts a synchronous send with tag 0.
    fn immediate_synchronous_send<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        self.immediate_synchronous_send_with_tag(scope, buf, 0)
    }

    /// Starts a ready send (a standard one in rcomm).
    ///
    /// # Safety
    /// As rsmpi: the matching receive must have been posted.
    unsafe fn immediate_ready_send_with_tag<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        let s = src_of(buf);
        let req = check(self.as_handle().comm().irsend(
            s.bytes().into_owned(),
            self.destination_rank() as u32,
            send_tag(tag),
        ));
        Request::new(Box::new(request::Send(Some(req), None)), buf, scope)
    }

    /// Starts a ready send with tag 0.
    ///
    /// # Safety
    /// As rsmpi: the matching receive must have been posted.
    unsafe fn immediate_ready_send<'a, Sc, Buf: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        buf: &'a Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
        Sc: Scope<'a>,
    {
        unsafe { self.immediate_ready_send_with_tag(scope, buf, 0) }
    }
}

impl Destination for Process<'_> {
    fn destination_rank(&self) -> Rank {
        self.rank
    }
}

/// Sends `msg` to `destination` and receives a value from `source` with tags.
pub fn send_receive_with_tags<M, D, R, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> (R, Status)
where
    M: Equivalence,
    D: Destination,
    R: Equivalence,
    S: Source,
{
    let mut x = MaybeUninit::<R>::zeroed();
    let mut d = Dst {
        ptr: x.as_mut_ptr().cast(),
        count: 1,
        dt: R::equivalent_datatype().dt().clone(),
    };
    let st = exchange(
        &src_of(msg),
        destination,
        sendtag,
        &mut d,
        source,
        receivetag,
    );
    (unsafe { x.assume_init() }, st)
}

/// Sends `msg` to `destination` and receives a value from `source` (`MPI_Sendrecv`).
pub fn send_receive<R, M, D, S>(msg: &M, destination: &D, source: &S) -> (R, Status)
where
    M: Equivalence,
    D: Destination,
    R: Equivalence,
    S: Source,
{
    send_receive_with_tags(msg, destination, 0, source, -1)
}

fn exchange<D: Destination, S: Source>(
    msg: &crate::datatype::Src,
    destination: &D,
    sendtag: Tag,
    d: &mut Dst,
    source: &S,
    receivetag: Tag,
) -> Status {
    let h = destination.as_handle();
    let c = h.comm();
    if std::ptr::eq(h, source.as_handle()) {
        // One communicator: rcomm's exchange (a send that leaves at once makes it a receive;
        // derived layouts gathered into and scattered out of the shared-memory ring).
        let (dest, src, rtag) = (
            destination.destination_rank() as u32,
            source.selector(),
            tag_sel(receivetag),
        );
        let st = if msg.dt.core.is_contiguous() && d.dt.core.is_contiguous() {
            let out = msg.bytes();
            d.with_bytes(|b| c.sendrecv(&out, dest, send_tag(sendtag), b, src, rtag))
        } else {
            // SAFETY: `msg` and `d` are the buffers' layouts (`src_of`, `dst_of`): readable,
            // and writable and borrowed by this call; the send is packed or gathered first.
            unsafe {
                c.sendrecv_dt_raw(
                    msg.ptr,
                    msg.count,
                    &msg.dt.core,
                    dest,
                    send_tag(sendtag),
                    d.ptr,
                    d.count,
                    &d.dt.core,
                    src,
                    rtag,
                )
            }
        };
        return Status(check(st));
    }
    // Post the receive first, then send, then wait: no deadlock whatever the sizes.
    let mut rreq = irecv_dst(
        source.as_handle(),
        source.selector(),
        receivetag,
        Dst {
            ptr: d.ptr,
            count: d.count,
            dt: d.dt.clone(),
        },
    );
    check(c.send(
        &msg.bytes(),
        destination.destination_rank() as u32,
        send_tag(sendtag),
    ));
    Status(rreq.wait())
}

/// Sends `msg` and receives into `buf` with tags.
pub fn send_receive_into_with_tags<M: ?Sized, D, B: ?Sized, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    buf: &mut B,
    source: &S,
    receivetag: Tag,
) -> Status
where
    M: Buffer,
    D: Destination,
    B: BufferMut,
    S: Source,
{
    exchange(
        &src_of(msg),
        destination,
        sendtag,
        &mut dst_of(buf),
        source,
        receivetag,
    )
}

/// Sends `msg` to `destination` and receives into `buf` from `source`.
pub fn send_receive_into<M: ?Sized, D, B: ?Sized, S>(
    msg: &M,
    destination: &D,
    buf: &mut B,
    source: &S,
) -> Status
where
    M: Buffer,
    D: Destination,
    B: BufferMut,
    S: Source,
{
    send_receive_into_with_tags(msg, destination, 0, buf, source, -1)
}

/// Sends `buf` and replaces it with the message received, with tags.
pub fn send_receive_replace_into_with_tags<B: ?Sized, D, S>(
    buf: &mut B,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> Status
where
    B: BufferMut,
    D: Destination,
    S: Source,
{
    let mut d = dst_of(buf);
    let out = crate::datatype::Src {
        ptr: d.ptr,
        count: d.count,
        dt: d.dt.clone(),
    }
    .bytes()
    .into_owned();
    let copy = crate::datatype::Src {
        ptr: out.as_ptr(),
        count: out.len() / d.dt.size().max(1),
        dt: crate::datatype::Dt {
            core: rcomm::datatype::Datatype::bytes(d.dt.size()),
            prim: None,
        },
    };
    exchange(&copy, destination, sendtag, &mut d, source, receivetag)
}

/// Sends `buf` to `destination` and replaces it with the message from `source`
/// (`MPI_Sendrecv_replace`).
pub fn send_receive_replace_into<B: ?Sized, D, S>(
    buf: &mut B,
    destination: &D,
    source: &S,
) -> Status
where
    B: BufferMut,
    D: Destination,
    S: Source,
{
    send_receive_replace_into_with_tags(buf, destination, 0, source, -1)
}

/// Useful traits.
pub mod traits {
    pub use super::{Destination, MatchedReceiveVec, Source};
}
