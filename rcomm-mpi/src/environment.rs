//! Starting and ending the job (rsmpi's `mpi::environment`).

use std::cmp::Ordering;
use std::os::raw::{c_double, c_int};
use std::string::FromUtf8Error;
use std::sync::Arc;

use crate::job;
pub use crate::job::{is_finalized, is_initialized};
use crate::topology::{CommHandle, SimpleCommunicator};

/// The job's environment; dropping it finalises (rsmpi's `Universe`): a barrier of all ranks,
/// as `MPI_Finalize`.
pub struct Universe {
    world: Arc<rcomm::World>,
    buffer: usize,
}

impl std::fmt::Debug for Universe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Universe")
            .field("size", &self.world.size())
            .finish()
    }
}

impl Universe {
    /// The communicator of all ranks (`MPI_COMM_WORLD`).
    pub fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::from_handle(CommHandle::world(self.world.clone()))
    }

    /// The number of ranks the job may hold (`MPI_UNIVERSE_SIZE`): the world's size.
    pub fn size(&self) -> Option<usize> {
        Some(self.world.size() as usize)
    }

    /// The application number (`MPI_APPNUM`): in a spawned process, the index of its command
    /// in the spawn; `None` in a process `rcomm-run` started.
    pub fn appnum(&self) -> Option<isize> {
        self.world.appnum().map(|a| a as isize)
    }

    /// The size of the buffer attached for buffered sends.
    pub fn buffer_size(&self) -> usize {
        self.buffer
    }

    /// Attaches a buffer of `size` bytes for buffered sends (`MPI_Buffer_attach`, replacing
    /// one attached before). rcomm allocates per message; the size is the budget.
    pub fn set_buffer_size(&mut self, size: usize) {
        self.detach_buffer();
        crate::check(rcomm::buffer_attach(size));
        self.buffer = size;
    }

    /// Detaches the buffered-send buffer (`MPI_Buffer_detach`): waits until every buffered
    /// send has been delivered.
    pub fn detach_buffer(&mut self) {
        if self.buffer > 0 {
            crate::check(rcomm::buffer_detach());
            self.buffer = 0;
        }
    }

    /// Disconnects from the parent job (`MPI_Comm_disconnect`): rcomm keeps the connection until
    /// finalize, where parents and children end together.
    pub fn disconnect_parent(&mut self) {}
}

impl Drop for Universe {
    fn drop(&mut self) {
        // MPI_Finalize is collective: no rank leaves while others may still talk to it (a
        // receive from any source would see an exited rank as lost). Not while unwinding:
        // the launcher ends the job when this rank exits.
        if !std::thread::panicking()
            && let Err(e) = self.world.barrier()
        {
            eprintln!("rcomm-mpi: finalize: {e}");
        }
        job::finished();
    }
}

/// Thread support levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threading {
    /// One thread.
    Single,
    /// Only the thread that initialised calls the library.
    Funneled,
    /// Any thread, one at a time.
    Serialized,
    /// Any thread, concurrently.
    Multiple,
}

/// MPI's constants (`MPI_THREAD_SINGLE` 0 to `MPI_THREAD_MULTIPLE` 3, as MPICH and Open MPI
/// define them).
impl From<std::os::raw::c_int> for Threading {
    fn from(i: std::os::raw::c_int) -> Threading {
        match i {
            0 => Threading::Single,
            1 => Threading::Funneled,
            2 => Threading::Serialized,
            3 => Threading::Multiple,
            _ => panic!("Unknown threading level: {i}"),
        }
    }
}

impl From<Threading> for rcomm::ThreadLevel {
    fn from(t: Threading) -> Self {
        match t {
            Threading::Single => rcomm::ThreadLevel::Single,
            Threading::Funneled => rcomm::ThreadLevel::Funneled,
            Threading::Serialized => rcomm::ThreadLevel::Serialized,
            Threading::Multiple => rcomm::ThreadLevel::Multiple,
        }
    }
}

impl From<rcomm::ThreadLevel> for Threading {
    fn from(t: rcomm::ThreadLevel) -> Self {
        match t {
            rcomm::ThreadLevel::Single => Threading::Single,
            rcomm::ThreadLevel::Funneled => Threading::Funneled,
            rcomm::ThreadLevel::Serialized => Threading::Serialized,
            rcomm::ThreadLevel::Multiple => Threading::Multiple,
        }
    }
}

impl Threading {
    fn level(self) -> u8 {
        match self {
            Threading::Single => 0,
            Threading::Funneled => 1,
            Threading::Serialized => 2,
            Threading::Multiple => 3,
        }
    }
}

impl PartialOrd for Threading {
    fn partial_cmp(&self, other: &Threading) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Threading {
    fn cmp(&self, other: &Threading) -> Ordering {
        self.level().cmp(&other.level())
    }
}

/// Initialises rcomm (`MPI_Init`); `None` if it was initialised before.
pub fn initialize() -> Option<Universe> {
    initialize_with_threading(Threading::Single).map(|x| x.0)
}

/// Initialises rcomm asking for a thread level (`MPI_Init_thread`, through
/// `rcomm::init_thread`). rcomm is thread-safe, so the level asked for is granted; `None` if
/// initialised before.
pub fn initialize_with_threading(threading: Threading) -> Option<(Universe, Threading)> {
    if !job::claim() {
        return None;
    }
    let (world, provided) = match rcomm::init_thread(threading.into()) {
        Ok((w, provided)) => (Arc::new(w), Threading::from(provided)),
        Err(e) => {
            eprintln!("rcomm-mpi: initialize failed: {e}");
            std::process::exit(1);
        }
    };
    job::started(world.clone());
    Some((Universe { world, buffer: 0 }, provided))
}

/// The thread level granted at initialisation (`MPI_Query_thread`: `rcomm::query_thread`);
/// `Single` before `initialize`.
pub fn threading_support() -> Threading {
    if is_initialized() {
        rcomm::query_thread().into()
    } else {
        Threading::Single
    }
}

/// The MPI standard version whose interface the facade offers: (3, 1).
pub fn version() -> (c_int, c_int) {
    (3, 1)
}

/// The library's version string (`rcomm <version>`).
pub fn library_version() -> Result<String, FromUtf8Error> {
    Ok(rcomm::library_version())
}

/// This node's name (`MPI_Get_processor_name`: `rcomm::processor_name`, the host name the
/// world reports, also before `initialize`).
pub fn processor_name() -> Result<String, FromUtf8Error> {
    Ok(rcomm::processor_name())
}

/// Seconds since a moment in this process's past (`MPI_Wtime`).
pub fn time() -> c_double {
    rcomm::wtime()
}

/// The resolution of [`time`] in seconds (`MPI_Wtick`).
pub fn time_resolution() -> c_double {
    rcomm::wtick()
}
