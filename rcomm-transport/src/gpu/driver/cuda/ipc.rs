//! Export and import between processes of one node: the key of an allocation (a legacy IPC
//! handle, or a descriptor offered through `fdshare` for pool and VMM memory: `share.rs`), and
//! the GET that imports a peer's allocation on first use (cached per peer and allocation) and
//! copies from it on the device's copy stream.

use super::*;

impl Driver {
    pub(in crate::gpu) fn export(&self, ptr: u64, len: usize) -> Result<RKey, GpuError> {
        let i = self.range(ptr, len)?;
        let mut st = self.lock();
        let (handle, kind) = match st.exports.lookup(i.base, i.buffer_id) {
            Some(h) => {
                st.stats.export_hits += 1;
                h
            }
            None => {
                self.cur(i.device)?;
                let h = match self.export_fd(&mut st, &i)? {
                    Some((kind, h)) => {
                        st.stats.fd_exports += 1;
                        (h, kind)
                    }
                    None => {
                        let mut h = cu::CUipcMemHandle { reserved: [0; 64] };
                        // SAFETY: `i.base` is the base of a live cuMemAlloc allocation;
                        // writes 64 bytes.
                        check(
                            unsafe { cu::cuIpcGetMemHandle(&mut h, i.base) },
                            "cuIpcGetMemHandle",
                            i.device as i32,
                        )?;
                        (h.reserved.map(|b| b as u8), ShareKind::Ipc)
                    }
                };
                st.exports.insert(i.base, i.buffer_id, h);
                st.stats.exports += 1;
                h
            }
        };
        crate::gpu::fdshare::withdraw_all(st.exports.take_gone());
        let uuid = self.devs[i.device as usize].uuid;
        Ok(encode_key(
            &KeyParts::of(&i, ptr, len, self.pid, handle, uuid).shared_as(kind),
        ))
    }

    pub(in crate::gpu) fn pin_export(&self, ptr: u64) -> Result<(), GpuError> {
        let i = self.ptr_info(ptr)?;
        self.lock().exports.pin(i.base);
        Ok(())
    }

    /// Whether there was an export to drop.
    pub(in crate::gpu) fn drop_export(&self, ptr: u64) -> Result<bool, GpuError> {
        let i = self.ptr_info(ptr)?;
        let gone = self.lock().exports.remove(i.base);
        crate::gpu::fdshare::withdraw(i.buffer_id);
        Ok(gone.is_some())
    }

    pub(in crate::gpu) fn get(
        &self,
        peer: u32,
        key: &RKey,
        dst: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        let k = decode_key(key.as_bytes())?;
        if len as u64 > k.len {
            return Err(GpuError::Invalid(format!(
                "get of {len} bytes from a key of {}",
                k.len
            )));
        }
        if k.pid == self.pid {
            return Err(GpuError::Unreachable("same process: no IPC".into()));
        }
        let level = rcomm_runtime::config::p2p_level();
        if level == P2pLevel::Off {
            return Err(GpuError::Unreachable(
                "RCOMM_P2P_LEVEL=off: no direct device copies".into(),
            ));
        }
        let src_dev = self
            .devs
            .iter()
            .position(|d| d.uuid == k.uuid)
            .map(|i| i as u32);
        let copy_dev = match self.ptr_info(dst) {
            Ok(i) => {
                if dst
                    .checked_add(len as u64)
                    .is_none_or(|e| e > i.base + i.size as u64)
                {
                    return Err(GpuError::Invalid(format!(
                        "get of {len} bytes to 0x{dst:x} runs past its allocation"
                    )));
                }
                i.device
            }
            // Into host memory: copied by the exporter's GPU where this process sees it, else
            // (a descriptor import needs no view of it) by this process's own.
            Err(GpuError::Invalid(_)) => match src_dev {
                Some(d) => d,
                None if k.kind.by_fd() => self.home()?,
                None => return Err(not_visible(peer, &k)),
            },
            Err(e) => return Err(e),
        };
        let how = match src_dev {
            Some(s) if s == copy_dev => format!("same GPU (GPU {})", self.devs[s as usize].pci),
            Some(s) => {
                let mut can: c_int = 0;
                // SAFETY: writes one int.
                check(
                    unsafe {
                        cu::cuDeviceCanAccessPeer(
                            &mut can,
                            self.devs[copy_dev as usize].dev,
                            self.devs[s as usize].dev,
                        )
                    },
                    "cuDeviceCanAccessPeer",
                    copy_dev as i32,
                )?;
                let (to, from) = (
                    &self.devs[copy_dev as usize].pci,
                    &self.devs[s as usize].pci,
                );
                let class = crate::gpu::link::class_between(to, from);
                if can == 0 || !rcomm_runtime::topo::p2p_allows(level, class) {
                    return Err(GpuError::Unreachable(format!(
                        "GPU {to} cannot copy from GPU {from} directly (peer access {}, link {class}, RCOMM_P2P_LEVEL {level:?})",
                        if can == 0 { "no" } else { "yes" }
                    )));
                }
                format!("peer copy GPU {from} -> GPU {to} (link {class})")
            }
            // Another GPU, which this process does not see: the driver maps its memory for
            // ours by descriptor (over whatever link joins them), never by a legacy handle.
            None if k.kind.by_fd() => {
                // Its PCI address from NVML, which sees every GPU of the node; unknown: the
                // farthest class.
                let to = &self.devs[copy_dev as usize].pci;
                let class = crate::gpu::link::pci_of_uuid(&k.uuid)
                    .map_or(rcomm_runtime::topo::PathClass::Sys, |from| {
                        crate::gpu::link::class_between(to, &from)
                    });
                if !rcomm_runtime::topo::p2p_allows(level, class) {
                    return Err(GpuError::Unreachable(format!(
                        "the GPU of rank {peer} ({}) is another GPU, link {class}, and RCOMM_P2P_LEVEL is {level:?}",
                        uuid_text(&k.uuid)
                    )));
                }
                format!(
                    "GPU {} (not visible here) -> GPU {to} (link {class})",
                    uuid_text(&k.uuid),
                )
            }
            None => return Err(not_visible(peer, &k)),
        };
        self.cur(copy_dev)?;
        let mut guard = self.lock();
        let mut cached = guard.imports.lookup(peer, k.pid, k.buffer_id);
        let mut fetched = None;
        if cached.is_none() && k.kind.by_fd() {
            // Asking the exporter for the descriptor takes a round trip: not under the lock.
            drop(guard);
            fetched = Some(self.import_fd(peer, &k, copy_dev)?);
            self.cur(copy_dev)?;
            guard = self.lock();
            cached = guard.imports.lookup(peer, k.pid, k.buffer_id);
            if let (Some(_), Some(m)) = (cached, fetched.take()) {
                // Another thread imported it meanwhile: keep one.
                self.close(&mut guard, vec![m]);
                self.cur(copy_dev)?;
            }
        }
        let st = &mut *guard;
        let mapped = match cached {
            Some(m) => {
                st.stats.import_hits += 1;
                m.ptr()
            }
            None => {
                let stale = st
                    .imports
                    .take_stale(peer, k.pid, k.buffer_id, k.base, k.alloc_size);
                st.stats.import_evictions += stale.len() as u64;
                self.close(st, stale);
                self.cur(copy_dev)?;
                let m = match fetched {
                    Some(m) => {
                        st.stats.fd_imports += 1;
                        m
                    }
                    None => {
                        let mut m: cu::CUdeviceptr = 0;
                        let h = cu::CUipcMemHandle {
                            reserved: k.handle.map(|b| b as c_char),
                        };
                        // SAFETY: writes one device pointer; the driver validates the handle
                        // (a bad or stale one is an error).
                        check(
                            unsafe {
                                cu::cuIpcOpenMemHandle_v2(
                                    &mut m,
                                    h,
                                    cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
                                        as c_uint,
                                )
                            },
                            "cuIpcOpenMemHandle_v2",
                            copy_dev as i32,
                        )?;
                        Mapping::Ipc {
                            dev: copy_dev,
                            ptr: m,
                        }
                    }
                };
                let full = st
                    .imports
                    .insert(peer, k.pid, k.buffer_id, k.base, k.alloc_size, m);
                st.stats.import_evictions += full.len() as u64;
                self.close(st, full);
                self.cur(copy_dev)?;
                st.stats.imports += 1;
                if st.logged.insert(peer) {
                    let by = match k.kind {
                        ShareKind::Ipc => "legacy IPC handle",
                        ShareKind::VmmFd => "VMM memory by file descriptor",
                        ShareKind::PoolFd => "pool memory by file descriptor",
                    };
                    rcomm_runtime::rlog!(
                        Info,
                        "NET",
                        "device memory from rank {peer}: CUDA IPC ({by}), {how}"
                    );
                }
                m.ptr()
            }
        };
        let s = self.copy_stream(st, copy_dev, peer)?;
        let e = self.event(st, copy_dev)?;
        // SAFETY: the source lies in the imported allocation (`decode_key` checked the
        // range against its size); `dst` is device memory checked above or host memory the
        // caller handed us for `len` bytes.
        let r = unsafe { cu::cuMemcpyAsync(dst, mapped + k.offset, len, s as cu::CUstream) };
        if let Err(err) = check(r, "cuMemcpyAsync", copy_dev as i32) {
            st.events[copy_dev as usize].push(e);
            return Err(err);
        }
        // SAFETY: a live event and stream of the current context.
        let r = unsafe { cu::cuEventRecord(e as cu::CUevent, s as cu::CUstream) };
        if let Err(err) = check(r, "cuEventRecord", copy_dev as i32) {
            st.events[copy_dev as usize].push(e);
            return Err(err);
        }
        st.stats.ipc_bytes += len as u64;
        Ok(Pending {
            device: copy_dev,
            handle: e as u64,
        })
    }

    /// Closes imported mappings (waiting for copies that may read them first).
    pub(super) fn close(&self, st: &mut State, gone: Vec<Mapping>) {
        for m in gone {
            let dev = m.dev();
            let r = self
                .cur(dev)
                .and_then(|()| self.drain_copies(st, dev))
                .and_then(|()| self.unmap(m));
            if let Err(e) = r {
                rcomm_runtime::rlog!(Warn, "NET", "closing an imported device allocation: {e}");
            }
        }
    }
}

/// The refusal of a legacy key whose GPU this process does not see.
fn not_visible(peer: u32, k: &KeyParts) -> GpuError {
    GpuError::Unreachable(format!(
        "the GPU of rank {peer} ({}) is not visible in this process, and its memory (cuMemAlloc) is shared by a legacy IPC handle, which needs it visible: allocate from a pool with POSIX file-descriptor handles or as VMM memory, or give the ranks of a node one CUDA_VISIBLE_DEVICES",
        uuid_text(&k.uuid)
    ))
}
