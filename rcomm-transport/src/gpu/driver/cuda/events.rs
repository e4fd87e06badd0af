//! Stream queries and events of the CUDA backend: what lets a caller poll for work it enqueued
//! instead of blocking in the driver (the NCCL engine's waits and watchdog).

use super::{Driver, check};
use crate::gpu::{Event, GpuError, Stream};
use cudarc::driver::sys as cu;

impl Driver {
    pub(in crate::gpu) fn stream_query(&self, s: Stream) -> Result<bool, GpuError> {
        self.cur(s.device)?;
        // SAFETY: `s.raw` is a stream of this device's context (0: the legacy default stream).
        match unsafe { cu::cuStreamQuery(s.raw as usize as cu::CUstream) } {
            cu::CUresult::CUDA_SUCCESS => Ok(true),
            cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuStreamQuery", s.device as i32).map(|()| false),
        }
    }

    pub(in crate::gpu) fn stream_is_capturing(&self, s: Stream) -> Result<bool, GpuError> {
        self.cur(s.device)?;
        let mut st = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: writes one status; `s.raw` is a stream of this device's context.
        check(
            unsafe { cu::cuStreamIsCapturing(s.raw as usize as cu::CUstream, &mut st) },
            "cuStreamIsCapturing",
            s.device as i32,
        )?;
        Ok(st != cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    pub(in crate::gpu) fn event_record(&self, s: Stream) -> Result<Event, GpuError> {
        // Recording on a capturing stream would make the event a graph node the host can
        // never poll: the caller tracks such work otherwise.
        if self.stream_is_capturing(s)? {
            return Err(GpuError::Invalid(
                "the stream is being captured into a CUDA graph: no event to poll".into(),
            ));
        }
        let e = {
            let mut st = self.lock();
            self.event(&mut st, s.device)?
        };
        // SAFETY: a live event and a stream of this device's context.
        let r = check(
            unsafe { cu::cuEventRecord(e as cu::CUevent, s.raw as usize as cu::CUstream) },
            "cuEventRecord",
            s.device as i32,
        );
        if let Err(err) = r {
            self.lock().events[s.device as usize].push(e);
            return Err(err);
        }
        Ok(Event {
            device: s.device,
            handle: e as u64,
        })
    }

    pub(in crate::gpu) fn event_query(&self, e: &Event) -> Result<bool, GpuError> {
        self.cur(e.device)?;
        // SAFETY: an event recorded by `event_record`, not destroyed yet.
        match unsafe { cu::cuEventQuery(e.handle as usize as cu::CUevent) } {
            cu::CUresult::CUDA_SUCCESS => Ok(true),
            cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery", e.device as i32).map(|()| false),
        }
    }

    /// Polls instead of `cuEventSynchronize`, which has no deadline: spins briefly (a short
    /// kernel is done within microseconds), then yields, then sleeps.
    pub(in crate::gpu) fn event_wait_host(
        &self,
        e: &Event,
        deadline: std::time::Instant,
    ) -> Result<bool, GpuError> {
        let mut round = 0u32;
        loop {
            if self.event_query(e)? {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            round += 1;
            match round {
                0..64 => std::hint::spin_loop(),
                64..1024 => std::thread::yield_now(),
                _ => std::thread::sleep(std::time::Duration::from_micros(50)),
            }
        }
    }

    pub(in crate::gpu) fn stream_wait_event(&self, s: Stream, e: &Event) -> Result<(), GpuError> {
        self.cur(s.device)?;
        // SAFETY: a recorded event and a stream of this device's context.
        check(
            unsafe {
                cu::cuStreamWaitEvent(
                    s.raw as usize as cu::CUstream,
                    e.handle as usize as cu::CUevent,
                    0,
                )
            },
            "cuStreamWaitEvent",
            s.device as i32,
        )
    }

    /// Events go back to the device's pool (an event may be re-recorded once its last record
    /// is no longer waited for).
    pub(in crate::gpu) fn event_destroy(&self, e: Event) -> Result<(), GpuError> {
        self.dev(e.device)?;
        self.lock().events[e.device as usize].push(e.handle as usize);
        Ok(())
    }
}
