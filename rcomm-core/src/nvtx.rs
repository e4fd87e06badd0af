//! NVTX ranges, so that Nsight Systems shows rcomm's collectives and point-to-point calls on
//! the timeline next to the application's kernels.
//!
//! `libnvToolsExt.so.1` (NVTX v2, shipped with the CUDA 11/12 toolkits and the
//! `nvidia-nvtx-cu12` wheel; it forwards to whatever profiler injected itself) is opened at the
//! first range, not linked: rcomm builds and runs without it. Where it does not load, or with
//! `RCOMM_NVTX=0`, a range costs one relaxed atomic load and nothing else.
//!
//! Ranges follow the flight recorder: a collective's range is open while its record is this
//! thread's current one (`fr::push`/`fr::pop`), so it carries the recorder's name
//! (`allreduce`, `bcast`, …) and, like the record, exists only while recording is on; the
//! blocking `send`/`recv` calls open one for their duration. NVTX ranges are per thread, and
//! so are both stacks, so they nest alike.
//!
//! Never run against the real library on the machine this was written on (no CUDA there).

use std::ffi::{c_char, c_int};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// Whether ranges go anywhere; `UNKNOWN` until the first range looks for the library.
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static FNS: OnceLock<Option<Fns>> = OnceLock::new();

struct Fns {
    push: unsafe extern "C" fn(*const c_char) -> c_int,
    pop: unsafe extern "C" fn() -> c_int,
}

const LIB: &std::ffi::CStr = c"libnvToolsExt.so.1";

fn load() -> Option<Fns> {
    // SAFETY: dlopen of a library whose initialisers only set up NVTX's injection hooks; the
    // handle is kept for the process (the functions below point into it).
    let h = unsafe { libc::dlopen(LIB.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return None;
    }
    // SAFETY: dlsym only looks symbols up; a non-null result is the function NVTX's header
    // declares with exactly these signatures.
    unsafe {
        let push = libc::dlsym(h, c"nvtxRangePushA".as_ptr());
        let pop = libc::dlsym(h, c"nvtxRangePop".as_ptr());
        if push.is_null() || pop.is_null() {
            return None;
        }
        Some(Fns {
            push: std::mem::transmute::<
                *mut libc::c_void,
                unsafe extern "C" fn(*const c_char) -> c_int,
            >(push),
            pop: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn() -> c_int>(pop),
        })
    }
}

/// The library's functions, looked for once; settles [`STATE`] before returning, so a pop can
/// trust that every earlier push saw the same answer.
fn fns() -> Option<&'static Fns> {
    let f = FNS
        .get_or_init(|| {
            if rcomm_runtime::config::nvtx() {
                load()
            } else {
                None
            }
        })
        .as_ref();
    STATE.store(if f.is_some() { ON } else { OFF }, Ordering::Relaxed);
    f
}

/// Opens a range named `name` on this thread.
#[inline]
pub(crate) fn push(name: &'static str) {
    #[cfg(test)]
    seen::push(name);
    if STATE.load(Ordering::Relaxed) != OFF {
        push_on(name);
    }
}

#[inline(never)]
fn push_on(name: &str) {
    if let Some(f) = fns() {
        // NVTX wants a C string and the names are not NUL-terminated; they are short.
        let mut buf = [0u8; 48];
        let n = name.len().min(buf.len() - 1);
        buf[..n].copy_from_slice(&name.as_bytes()[..n]);
        // SAFETY: a NUL-terminated string that outlives the call (NVTX copies it).
        unsafe { (f.push)(buf.as_ptr().cast()) };
    }
}

/// Closes this thread's innermost range.
#[inline]
pub(crate) fn pop() {
    #[cfg(test)]
    seen::pop();
    // Only ON pops: before the first push nothing was pushed, and the state never changes
    // after that push settled it.
    if STATE.load(Ordering::Relaxed) == ON
        && let Some(Some(f)) = FNS.get()
    {
        // SAFETY: a function of the loaded library, no arguments.
        unsafe { (f.pop)() };
    }
}

/// A range open while the value lives.
#[must_use]
pub(crate) struct Range(());

impl Range {
    #[inline]
    pub(crate) fn new(name: &'static str) -> Self {
        push(name);
        Range(())
    }
}

impl Drop for Range {
    #[inline]
    fn drop(&mut self) {
        pop();
    }
}

/// What this thread's hooks did, whether or not the library is there: tests prove the hooks
/// are hit without NVTX installed. Off until a test asks ([`seen::take`]), so that other tests
/// (and `fr`'s hook cost) do not pay for a growing log.
#[cfg(test)]
pub(crate) mod seen {
    use std::cell::RefCell;

    thread_local! {
        static LOG: RefCell<Option<(Vec<&'static str>, i64)>> = const { RefCell::new(None) };
    }

    pub(super) fn push(name: &'static str) {
        LOG.with(|l| {
            if let Some((names, open)) = l.borrow_mut().as_mut() {
                names.push(name);
                *open += 1;
            }
        });
    }

    pub(super) fn pop() {
        LOG.with(|l| {
            if let Some((_, open)) = l.borrow_mut().as_mut() {
                *open -= 1;
            }
        });
    }

    /// The names pushed on this thread since the last call, and how many ranges opened since
    /// the first call are still open; the first call starts the log.
    pub(crate) fn take() -> (Vec<&'static str>, i64) {
        LOG.with(|l| {
            let mut l = l.borrow_mut();
            let (names, open) = l.get_or_insert_with(Default::default);
            (std::mem::take(names), *open)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tag;

    #[test]
    fn without_the_library_ranges_are_no_ops_and_the_hooks_are_hit() {
        let cfg = rcomm_runtime::config::Config::from_map(&Default::default()).unwrap();
        let w = crate::world::init_for_test(&cfg);
        seen::take();
        {
            let _r = Range::new("allreduce");
        }
        let mut v = [1.0f32, 2.0];
        w.allreduce_in_place(&mut v, crate::Op::Sum).unwrap();
        w.send(&[7u8; 4], 0, Tag(5)).unwrap();
        let mut b = [0u8; 4];
        w.recv(&mut b, 0, Tag(5)).unwrap();
        assert_eq!(b, [7; 4]);
        let (names, open) = seen::take();
        assert_eq!(open, 0, "every range closed: {names:?}");
        assert_eq!(names.first(), Some(&"allreduce"), "{names:?}");
        for n in ["send", "recv"] {
            assert!(names.contains(&n), "{n} not in {names:?}");
        }
        assert!(
            names.iter().filter(|&&n| n == "allreduce").count() >= 2,
            "the collective's own range: {names:?}"
        );
        // Looked for once; absent (as without CUDA), every later range is the one load.
        match FNS.get() {
            Some(None) => assert_eq!(STATE.load(Ordering::Relaxed), OFF),
            Some(Some(_)) => assert_eq!(STATE.load(Ordering::Relaxed), ON),
            None => panic!("the first range did not look for the library"),
        }
    }
}
