//! The verbs an `ib` endpoint of a process runs on: the simulated fabric (tests) or, on a
//! machine with rdma-core, libibverbs loaded at run time. An enum, not a trait object, so
//! the data path's calls are static (the design's rule for transports).
// Without `sim` and `ib` the enum has no variant: the methods' arguments go unused.
#![cfg_attr(not(any(feature = "sim", feature = "ib")), allow(unused_variables))]

#[cfg(feature = "ib")]
use super::libverbs::LibVerbs;
#[cfg(feature = "sim")]
use super::sim::SimVerbs;
use super::verbs::*;

/// One of the verbs implementations.
// One per process, made once and never moved on the data path: the size difference is moot.
#[allow(clippy::large_enum_variant)]
pub enum AnyVerbs {
    /// The simulated fabric (feature `sim`: tests).
    #[cfg(feature = "sim")]
    Sim(SimVerbs),
    /// libibverbs, loaded at run time.
    #[cfg(feature = "ib")]
    Lib(LibVerbs),
}

macro_rules! each {
    ($self:ident, $v:ident => $e:expr) => {
        match $self {
            #[cfg(feature = "sim")]
            AnyVerbs::Sim($v) => $e,
            #[cfg(feature = "ib")]
            AnyVerbs::Lib($v) => $e,
            // Neither: the enum has no value, and nothing here runs.
            #[cfg(not(any(feature = "sim", feature = "ib")))]
            _ => match *$self {},
        }
    };
}

impl Verbs for AnyVerbs {
    fn devices(&self) -> Result<Vec<DeviceAttr>> {
        each!(self, v => v.devices())
    }
    fn open(&self, name: &str) -> Result<Context> {
        each!(self, v => v.open(name))
    }
    fn close(&self, ctx: Context) -> Result<()> {
        each!(self, v => v.close(ctx))
    }
    fn query_port(&self, ctx: Context, port: u8) -> Result<PortAttr> {
        each!(self, v => v.query_port(ctx, port))
    }
    fn query_gid(&self, ctx: Context, port: u8, index: u16) -> Result<GidEntry> {
        each!(self, v => v.query_gid(ctx, port, index))
    }
    fn alloc_pd(&self, ctx: Context) -> Result<Pd> {
        each!(self, v => v.alloc_pd(ctx))
    }
    fn dealloc_pd(&self, pd: Pd) -> Result<()> {
        each!(self, v => v.dealloc_pd(pd))
    }
    unsafe fn reg_mr(&self, pd: Pd, addr: u64, len: u64, access: Access) -> Result<Mr> {
        // SAFETY: the caller's promise, passed on.
        each!(self, v => unsafe { v.reg_mr(pd, addr, len, access) })
    }
    unsafe fn reg_dmabuf_mr(
        &self,
        pd: Pd,
        offset: u64,
        len: u64,
        iova: u64,
        fd: i32,
        access: Access,
    ) -> Result<Mr> {
        // SAFETY: the caller's promise, passed on.
        each!(self, v => unsafe { v.reg_dmabuf_mr(pd, offset, len, iova, fd, access) })
    }
    fn dereg_mr(&self, mr: Mr) -> Result<()> {
        each!(self, v => v.dereg_mr(mr))
    }
    fn create_cq(&self, ctx: Context, cqe: u32) -> Result<Cq> {
        each!(self, v => v.create_cq(ctx, cqe))
    }
    fn destroy_cq(&self, cq: Cq) -> Result<()> {
        each!(self, v => v.destroy_cq(cq))
    }
    fn poll_cq(&self, cq: Cq, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        each!(self, v => v.poll_cq(cq, max, out))
    }
    fn create_qp(&self, pd: Pd, attr: &QpInitAttr) -> Result<Qp> {
        each!(self, v => v.create_qp(pd, attr))
    }
    fn modify_qp(&self, qp: Qp, m: &QpModify) -> Result<()> {
        each!(self, v => v.modify_qp(qp, m))
    }
    fn qp_state(&self, qp: Qp) -> Result<QpState> {
        each!(self, v => v.qp_state(qp))
    }
    fn destroy_qp(&self, qp: Qp) -> Result<()> {
        each!(self, v => v.destroy_qp(qp))
    }
    fn post_send(&self, qp: Qp, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError> {
        each!(self, v => v.post_send(qp, wrs))
    }
    fn post_recv(&self, qp: Qp, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        each!(self, v => v.post_recv(qp, wrs))
    }
    fn get_async_event(&self, ctx: Context) -> Result<Option<AsyncEvent>> {
        each!(self, v => v.get_async_event(ctx))
    }
    fn event_fds(&self, ctx: Context, cq: Cq) -> [Option<std::os::fd::RawFd>; 2] {
        each!(self, v => v.event_fds(ctx, cq))
    }
    fn arm_cq(&self, cq: Cq) -> Result<()> {
        each!(self, v => v.arm_cq(cq))
    }
}

/// The `ib` endpoint as a process has it.
pub type IbNet = super::ep::IbEndpoint<AnyVerbs>;
