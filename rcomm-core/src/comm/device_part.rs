//! What a communicator and its process keep for collectives on device memory: the link class
//! of the communicator's devices, and the process's device scratch and streams. The data is here so that `Shared` and `Communicator` hold it typed; what it does is
//! `gpu::exec`'s and `gpu::coll`'s.

use rcomm_transport::gpu::Stream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// How the devices of a communicator's ranks reach each other, the worst pair deciding. The
/// class sets the α (per step: the host rendezvous, the copy's launch, the stream wait) and β
/// of the device executor's cost model (`coll::tuner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DevLink {
    /// Every rank on one GPU: copies read and write the same memory, so the ranks of a step
    /// share its bandwidth.
    SameGpu,
    /// GPUs of one node joined by NVLink (not told apart from PCIe until the link is looked
    /// up; the cost model knows it already).
    #[allow(dead_code)]
    NvLink,
    /// GPUs of one node over PCIe (or a link not known to be NVLink).
    Pcie,
    /// Through host memory: ranks on other nodes, or `RCOMM_P2P_LEVEL=off`.
    Staged,
}

impl DevLink {
    /// The name in logs and records.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DevLink::SameGpu => "same GPU",
            DevLink::NvLink => "NVLink",
            DevLink::Pcie => "PCIe",
            DevLink::Staged => "host staging",
        }
    }
}

/// A communicator's device facts, shared by its clones (and `with_algo` handles): agreed by
/// every rank on the first device collective, so each handle asks once.
#[derive(Debug, Clone, Default)]
pub(crate) struct DevicePart {
    link: Arc<OnceLock<DevLink>>,
}

impl DevicePart {
    /// The link class, once agreed.
    #[inline]
    pub(crate) fn link(&self) -> Option<DevLink> {
        self.link.get().copied()
    }

    /// Keeps the agreed link class (the first one stays).
    pub(crate) fn set_link(&self, l: DevLink) {
        let _ = self.link.set(l);
    }
}

/// Device scratch held by every process state together: what the deprecated process-wide
/// `gpu::scratch_bytes` reports.
pub(crate) static SCRATCH_HELD: AtomicUsize = AtomicUsize::new(0);

/// The process's device state for the executor, kept in `Shared` and reused across calls and
/// communicators (allocating device memory or a stream per call would cost more than the
/// collective); freed with the process state (`gpu::exec` frees it).
#[derive(Debug, Default)]
pub(crate) struct DeviceState {
    /// Scratch buffers not on loan: (device, address, bytes).
    pub(crate) scratch: Mutex<Vec<(u32, u64, usize)>>,
    /// Bytes of every scratch buffer, on loan or not.
    pub(crate) scratch_held: AtomicUsize,
    /// The executor's stream per device (made on first use).
    pub(crate) streams: Mutex<Vec<(u32, Stream)>>,
}

impl DeviceState {
    /// Counts `bytes` of scratch more (or less, negative) in this state and the process's.
    pub(crate) fn count_scratch(&self, bytes: usize, more: bool) {
        if more {
            self.scratch_held.fetch_add(bytes, Ordering::Relaxed);
            SCRATCH_HELD.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.scratch_held.fetch_sub(bytes, Ordering::Relaxed);
            SCRATCH_HELD.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

/// A communicator's device part as its users see it ([`Communicator::device`]).
///
/// [`Communicator::device`]: crate::Communicator::device
#[derive(Debug, Clone, Copy)]
pub struct Device<'a> {
    pub(crate) part: &'a DevicePart,
    pub(crate) state: &'a DeviceState,
}

impl Device<'_> {
    /// The class of link between the communicator's devices ("same GPU", "NVLink", "PCIe",
    /// "host staging"), once its first device collective has agreed on it; `None` before.
    pub fn link(&self) -> Option<&'static str> {
        self.part.link().map(DevLink::name)
    }

    /// Bytes of device scratch this process holds for its device collectives (kept for reuse,
    /// on every device, for every communicator of the process).
    pub fn scratch_bytes(&self) -> usize {
        self.state.scratch_held.load(Ordering::Relaxed)
    }
}
