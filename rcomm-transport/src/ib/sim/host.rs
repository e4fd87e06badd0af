//! A simulated host's side of the fabric: the [`Verbs`] calls of a [`SimVerbs`] handle on the
//! HCAs it sees, each checked as libibverbs would check it before the fabric's state changes.

use super::*;

impl SimVerbs {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.fabric.lock()
    }

    fn ctx_hca(&self, s: &State, ctx: Context) -> Result<usize> {
        let c = s.ctxs.get(&ctx.0).ok_or(VerbsError::BadHandle("context"))?;
        if !self.visible.contains(&c.hca) {
            return Err(VerbsError::BadHandle("context"));
        }
        Ok(c.hca)
    }

    fn live_hca(&self, s: &State, ctx: Context) -> Result<usize> {
        let h = self.ctx_hca(s, ctx)?;
        if !s.hcas[h].alive {
            return Err(VerbsError::DeviceDead(s.hcas[h].spec.name.clone()));
        }
        Ok(h)
    }

    fn port<'s>(&self, s: &'s State, ctx: Context, port: u8) -> Result<(usize, &'s PortSpec)> {
        let h = self.ctx_hca(s, ctx)?;
        let spec = &s.hcas[h].spec;
        let p = spec
            .ports
            .get(usize::from(port).wrapping_sub(1))
            .ok_or_else(|| VerbsError::NoPort {
                dev: spec.name.clone(),
                port,
            })?;
        Ok((h, p))
    }

    fn qp_of<'s>(&self, s: &'s State, qp: Qp) -> Result<&'s QpObj> {
        s.qps
            .get(&qp.id)
            .filter(|q| q.qpn == qp.qpn && self.visible.contains(&q.hca))
            .ok_or(VerbsError::BadHandle("QP"))
    }
}

fn invalid<T>(why: impl Into<String>) -> Result<T> {
    Err(VerbsError::Invalid(why.into()))
}

impl Verbs for SimVerbs {
    fn devices(&self) -> Result<Vec<DeviceAttr>> {
        let s = self.lock();
        Ok(self
            .visible
            .iter()
            .map(|&h| {
                let spec = &s.hcas[h].spec;
                DeviceAttr {
                    name: spec.name.clone(),
                    node_guid: spec.node_guid,
                    phys_port_cnt: spec.ports.len() as u8,
                    max_qp_wr: MAX_QP_WR,
                    max_sge: MAX_SGE,
                    max_cqe: MAX_CQE,
                }
            })
            .collect())
    }

    fn open(&self, name: &str) -> Result<Context> {
        let mut s = self.lock();
        let h = self
            .visible
            .iter()
            .copied()
            .find(|&h| s.hcas[h].spec.name == name)
            .ok_or_else(|| VerbsError::NoDevice(name.into()))?;
        if !s.hcas[h].alive {
            return Err(VerbsError::DeviceDead(name.into()));
        }
        let id = s.id();
        s.ctxs.insert(
            id,
            CtxObj {
                hca: h,
                events: VecDeque::new(),
            },
        );
        Ok(Context(id))
    }

    fn close(&self, ctx: Context) -> Result<()> {
        let mut s = self.lock();
        self.ctx_hca(&s, ctx)?;
        if s.pds.values().any(|p| p.ctx == ctx.0) || s.cqs.values().any(|c| c.ctx == ctx.0) {
            return Err(VerbsError::Busy("context"));
        }
        s.ctxs.remove(&ctx.0);
        Ok(())
    }

    fn query_port(&self, ctx: Context, port: u8) -> Result<PortAttr> {
        let s = self.lock();
        let (h, p) = self.port(&s, ctx, port)?;
        let up = s.hcas[h].up[usize::from(port) - 1];
        Ok(PortAttr {
            state: if up {
                PortState::Active
            } else {
                PortState::Down
            },
            link_layer: p.link_layer,
            active_mtu: p.active_mtu,
            active_width: p.width,
            active_speed: p.speed,
            lid: p.lid,
            gid_tbl_len: p.gids.len() as u16,
        })
    }

    fn query_gid(&self, ctx: Context, port: u8, index: u16) -> Result<GidEntry> {
        let s = self.lock();
        let (h, p) = self.port(&s, ctx, port)?;
        let &(gid, gid_type) = p
            .gids
            .get(usize::from(index))
            .filter(|(g, _)| !g.is_zero())
            .ok_or_else(|| VerbsError::NoGid {
                dev: s.hcas[h].spec.name.clone(),
                port,
                index,
            })?;
        Ok(GidEntry {
            index,
            gid,
            gid_type,
            ndev: None,
        })
    }

    fn alloc_pd(&self, ctx: Context) -> Result<Pd> {
        let mut s = self.lock();
        self.live_hca(&s, ctx)?;
        let id = s.id();
        s.pds.insert(id, PdObj { ctx: ctx.0 });
        Ok(Pd(id))
    }

    fn dealloc_pd(&self, pd: Pd) -> Result<()> {
        let mut s = self.lock();
        let p = s.pds.get(&pd.0).ok_or(VerbsError::BadHandle("PD"))?;
        self.ctx_hca(&s, Context(p.ctx))?;
        if s.mrs.values().any(|m| m.pd == pd.0) || s.qps.values().any(|q| q.pd == pd.0) {
            return Err(VerbsError::Busy("protection domain"));
        }
        s.pds.remove(&pd.0);
        Ok(())
    }

    unsafe fn reg_mr(&self, pd: Pd, addr: u64, len: u64, access: Access) -> Result<Mr> {
        let mut s = self.lock();
        let ctx = s.pds.get(&pd.0).ok_or(VerbsError::BadHandle("PD"))?.ctx;
        let h = self.live_hca(&s, Context(ctx))?;
        let writes = Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0;
        if access.0 & writes != 0 && !access.contains(Access::LOCAL_WRITE) {
            return invalid("remote write or atomic access needs local write");
        }
        if access.0 & !0xf != 0 {
            return invalid(format!("unknown access flags {:#x}", access.0));
        }
        if len == 0 || addr == 0 || addr.checked_add(len).is_none() || len > 1 << 46 {
            return invalid(format!("range {addr:#x}+{len}"));
        }
        // Keys are never reused: an old key must fault, not reach a new registration.
        let k = s.hcas[h].next_key;
        s.hcas[h].next_key += 2;
        let (lkey, rkey) = (k << 8 | 0x11, (k + 1) << 8 | 0x22);
        let id = s.id();
        s.mrs.insert(
            id,
            MrObj {
                pd: pd.0,
                hca: h,
                addr,
                len,
                access,
            },
        );
        s.lkeys.insert((h, lkey), id);
        s.rkeys.insert((h, rkey), id);
        Ok(Mr {
            id,
            lkey,
            rkey,
            addr,
            len,
        })
    }

    /// The GPU stand-in's device memory is host memory and has no dma-buf: its "export" is
    /// the descriptor `-1` with the device pointer as `iova`, which registers that range as
    /// host memory. Any real descriptor is refused (the simulation cannot map one).
    unsafe fn reg_dmabuf_mr(
        &self,
        pd: Pd,
        offset: u64,
        len: u64,
        iova: u64,
        fd: i32,
        access: Access,
    ) -> Result<Mr> {
        if fd != -1 || offset != 0 {
            return invalid(format!(
                "the simulated fabric registers only the GPU stand-in's memory (fd -1), not fd {fd}"
            ));
        }
        // SAFETY: the caller's promise for the range, passed on.
        unsafe { self.reg_mr(pd, iova, len, access) }
    }

    fn dereg_mr(&self, mr: Mr) -> Result<()> {
        let mut s = self.lock();
        let m = s.mrs.get(&mr.id).ok_or(VerbsError::BadHandle("MR"))?;
        if !self.visible.contains(&m.hca) {
            return Err(VerbsError::BadHandle("MR"));
        }
        let h = m.hca;
        s.mrs.remove(&mr.id);
        s.lkeys.remove(&(h, mr.lkey));
        s.rkeys.remove(&(h, mr.rkey));
        Ok(())
    }

    fn create_cq(&self, ctx: Context, cqe: u32) -> Result<Cq> {
        let mut s = self.lock();
        self.live_hca(&s, ctx)?;
        if cqe == 0 || cqe > MAX_CQE {
            return invalid(format!("CQ of {cqe} entries (1 to {MAX_CQE})"));
        }
        let id = s.id();
        s.cqs.insert(
            id,
            CqObj {
                ctx: ctx.0,
                cap: cqe as usize,
                q: VecDeque::new(),
                overrun: false,
            },
        );
        Ok(Cq(id))
    }

    fn destroy_cq(&self, cq: Cq) -> Result<()> {
        let mut s = self.lock();
        let c = s.cqs.get(&cq.0).ok_or(VerbsError::BadHandle("CQ"))?;
        self.ctx_hca(&s, Context(c.ctx))?;
        if s.qps
            .values()
            .any(|q| q.send_cq == cq.0 || q.recv_cq == cq.0)
        {
            return Err(VerbsError::Busy("completion queue"));
        }
        s.cqs.remove(&cq.0);
        Ok(())
    }

    fn poll_cq(&self, cq: Cq, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        let mut s = self.lock();
        let ctx = s.cqs.get(&cq.0).ok_or(VerbsError::BadHandle("CQ"))?.ctx;
        self.ctx_hca(&s, Context(ctx))?;
        let c = s.cqs.get_mut(&cq.0).expect("cq");
        if c.overrun {
            return Err(VerbsError::CqOverrun);
        }
        let n = max.min(c.q.len());
        out.extend(c.q.drain(..n));
        Ok(n)
    }

    fn create_qp(&self, pd: Pd, attr: &QpInitAttr) -> Result<Qp> {
        let mut s = self.lock();
        let ctx = s.pds.get(&pd.0).ok_or(VerbsError::BadHandle("PD"))?.ctx;
        let h = self.live_hca(&s, Context(ctx))?;
        for cq in [attr.send_cq, attr.recv_cq] {
            if s.cqs
                .get(&cq.0)
                .is_none_or(|c| s.ctxs.get(&c.ctx).is_none_or(|x| x.hca != h))
            {
                return Err(VerbsError::BadHandle("CQ"));
            }
        }
        let c = attr.cap;
        if c.max_send_wr == 0
            || c.max_send_wr > MAX_QP_WR
            || c.max_recv_wr > MAX_QP_WR
            || c.max_send_sge > MAX_SGE
            || c.max_recv_sge > MAX_SGE
        {
            return invalid(format!("QP capabilities {c:?} beyond the device's"));
        }
        let qpn = s.hcas[h].next_qpn;
        s.hcas[h].next_qpn += 1;
        let id = s.id();
        s.qps.insert(
            id,
            QpObj {
                ctx,
                hca: h,
                pd: pd.0,
                qpn,
                send_cq: attr.send_cq.0,
                recv_cq: attr.recv_cq.0,
                cap: c,
                state: QpState::Reset,
                init: None,
                rtr: None,
                rts: None,
                sq: VecDeque::new(),
                rq: VecDeque::new(),
                inbound: None,
                sq_psn: 0,
                rq_psn: 0,
            },
        );
        Ok(Qp { id, qpn })
    }

    fn modify_qp(&self, qp: Qp, m: &QpModify) -> Result<()> {
        let mut s = self.lock();
        let q = self.qp_of(&s, qp)?;
        let (state, h, qpn) = (q.state, q.hca, q.qpn);
        let wrong = |need: &str| {
            Err(VerbsError::QpState {
                qpn,
                state,
                why: format!("this transition needs {need}"),
            })
        };
        match *m {
            QpModify::Init(a) => {
                if state != QpState::Reset {
                    return wrong("RESET");
                }
                if usize::from(a.port).wrapping_sub(1) >= s.hcas[h].spec.ports.len() {
                    return invalid(format!("port {}", a.port));
                }
                if a.pkey_index != 0 {
                    return invalid(format!(
                        "P_Key index {} (the table has one entry)",
                        a.pkey_index
                    ));
                }
                let q = s.qps.get_mut(&qp.id).expect("qp");
                q.init = Some(a);
                q.state = QpState::Init;
            }
            QpModify::Rtr(a) => {
                if state != QpState::Init {
                    return wrong("INIT");
                }
                let init = q.init.expect("init");
                let port = &s.hcas[h].spec.ports[usize::from(init.port) - 1];
                if a.ah.port != init.port {
                    return invalid(format!(
                        "address on port {}, QP on port {}",
                        a.ah.port, init.port
                    ));
                }
                if a.path_mtu > port.active_mtu {
                    return invalid(format!(
                        "path MTU {} above the port's {}",
                        a.path_mtu.bytes(),
                        port.active_mtu.bytes()
                    ));
                }
                if a.dest_qpn > PSN_MASK
                    || a.rq_psn > PSN_MASK
                    || a.min_rnr_timer > 31
                    || a.ah.sl > 15
                {
                    return invalid("dest_qpn and rq_psn are 24 bits, min_rnr_timer 5, SL 4");
                }
                match a.ah.grh {
                    None if port.link_layer == LinkLayer::Ethernet => {
                        return invalid("RoCE needs a global route (GRH)");
                    }
                    Some(g)
                        if port
                            .gids
                            .get(usize::from(g.sgid_index))
                            .is_none_or(|e| e.0.is_zero()) =>
                    {
                        return invalid(format!("source GID index {} is empty", g.sgid_index));
                    }
                    _ => {}
                }
                let q = s.qps.get_mut(&qp.id).expect("qp");
                q.rtr = Some(a);
                q.rq_psn = a.rq_psn;
                q.state = QpState::Rtr;
            }
            QpModify::Rts(a) => {
                if state != QpState::Rtr {
                    return wrong("RTR");
                }
                if a.timeout > 31 || a.retry_cnt > 7 || a.rnr_retry > 7 || a.sq_psn > PSN_MASK {
                    return invalid(
                        "timeout is 0 to 31, retry_cnt and rnr_retry 0 to 7, sq_psn 24 bits",
                    );
                }
                let q = s.qps.get_mut(&qp.id).expect("qp");
                q.rts = Some(a);
                q.sq_psn = a.sq_psn;
                q.state = QpState::Rts;
            }
            QpModify::Err => s.set_err(qp.id),
            QpModify::Reset => {
                let q = s.qps.get_mut(&qp.id).expect("qp");
                q.state = QpState::Reset;
                q.init = None;
                q.rtr = None;
                q.rts = None;
                q.sq.clear();
                q.rq.clear();
                q.inbound = None;
            }
        }
        Ok(())
    }

    fn qp_state(&self, qp: Qp) -> Result<QpState> {
        let s = self.lock();
        Ok(self.qp_of(&s, qp)?.state)
    }

    fn destroy_qp(&self, qp: Qp) -> Result<()> {
        let mut s = self.lock();
        self.qp_of(&s, qp)?;
        s.qps.remove(&qp.id);
        Ok(())
    }

    fn post_send(&self, qp: Qp, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError> {
        let mut s = self.lock();
        let now = s.now;
        for (i, wr) in wrs.iter().enumerate() {
            let bad = |error| PostError { bad_wr: i, error };
            let q = self.qp_of(&s, qp).map_err(bad)?;
            if !matches!(q.state, QpState::Rts | QpState::Err) {
                return Err(bad(VerbsError::QpState {
                    qpn: q.qpn,
                    state: q.state,
                    why: "post_send needs RTS".into(),
                }));
            }
            if wr.sg.len() > q.cap.max_send_sge as usize {
                return Err(bad(VerbsError::Invalid(format!(
                    "{} entries, the QP takes {}",
                    wr.sg.len(),
                    q.cap.max_send_sge
                ))));
            }
            let len: u64 = wr.sg.iter().map(|e| u64::from(e.len)).sum();
            if len > MAX_MSG {
                return Err(bad(VerbsError::Invalid(format!("message of {len} bytes"))));
            }
            if q.sq.len() >= q.cap.max_send_wr as usize {
                return Err(bad(VerbsError::QueueFull("send queue")));
            }
            let job = SendJob {
                wr_id: wr.wr_id,
                op: wr.op,
                sg: wr.sg.to_vec(),
                signaled: wr.signaled,
                len,
                done: 0,
                retries: 0,
                rnr: 0,
                due: Some(now),
            };
            if q.state == QpState::Err {
                s.send_wc(qp.id, &job, WcStatus::WrFlushErr);
            } else {
                s.qps.get_mut(&qp.id).expect("qp").sq.push_back(job);
            }
        }
        Ok(())
    }

    fn post_recv(&self, qp: Qp, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        let mut s = self.lock();
        for (i, wr) in wrs.iter().enumerate() {
            let bad = |error| PostError { bad_wr: i, error };
            let q = self.qp_of(&s, qp).map_err(bad)?;
            if q.state == QpState::Reset {
                return Err(bad(VerbsError::QpState {
                    qpn: q.qpn,
                    state: q.state,
                    why: "post_recv needs INIT or later".into(),
                }));
            }
            if wr.sg.len() > q.cap.max_recv_sge as usize {
                return Err(bad(VerbsError::Invalid(format!(
                    "{} entries, the QP takes {}",
                    wr.sg.len(),
                    q.cap.max_recv_sge
                ))));
            }
            if q.rq.len() >= q.cap.max_recv_wr as usize {
                return Err(bad(VerbsError::QueueFull("receive queue")));
            }
            if q.state == QpState::Err {
                s.recv_wc(qp.id, wr.wr_id, WcStatus::WrFlushErr, 0, None);
            } else {
                let job = RecvJob {
                    wr_id: wr.wr_id,
                    sg: wr.sg.to_vec(),
                };
                s.qps.get_mut(&qp.id).expect("qp").rq.push_back(job);
            }
        }
        Ok(())
    }

    fn get_async_event(&self, ctx: Context) -> Result<Option<AsyncEvent>> {
        let mut s = self.lock();
        self.ctx_hca(&s, ctx)?;
        Ok(s.ctxs.get_mut(&ctx.0).and_then(|c| c.events.pop_front()))
    }
}
