//! What a transport offers the protocol layer: the operations it runs, the memory it reads and
//! writes, whether that memory must be registered, and hints for the cost model. The core's
//! rendezvous protocols (GET, PUT, STREAM) are chosen per message from these, never from the
//! name of the transport.

/// A set of operations a transport (or one lane of it) runs.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Ops(u8);

impl Ops {
    /// Ordered active messages: a header and a small payload, delivered in send order per peer.
    pub const AM: Ops = Ops(1);
    /// Chunks of a large payload through bounce buffers, placed by offset at the receiver.
    pub const STREAM: Ops = Ops(2);
    /// One-sided read of registered remote memory (the receiver pulls).
    pub const GET: Ops = Ops(4);
    /// One-sided write into registered remote memory (the sender pushes after a CTS).
    pub const PUT: Ops = Ops(8);
    /// A write that also delivers a 32-bit immediate to the target.
    pub const PUT_IMM: Ops = Ops(16);
    /// No operation.
    pub const NONE: Ops = Ops(0);

    /// Whether every operation of `o` is in this set.
    pub const fn contains(self, o: Ops) -> bool {
        self.0 & o.0 == o.0
    }

    /// Both sets.
    pub const fn with(self, o: Ops) -> Ops {
        Ops(self.0 | o.0)
    }

    /// This set less `o`.
    pub const fn without(self, o: Ops) -> Ops {
        Ops(self.0 & !o.0)
    }
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Ops::AM, "AM"),
            (Ops::STREAM, "STREAM"),
            (Ops::GET, "GET"),
            (Ops::PUT, "PUT"),
            (Ops::PUT_IMM, "PUT_IMM"),
        ];
        let mut first = true;
        for (o, n) in names {
            if self.contains(o) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("NONE")?;
        }
        Ok(())
    }
}

/// What a transport does beyond its operations, as a set: everything the layers above would
/// otherwise ask of one transport by name.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Features(u8);

impl Features {
    /// No feature.
    pub const NONE: Features = Features(0);
    /// A message's payload can be written straight into the transport by the sender
    /// ([`crate::transport::Transport::try_send_with`]: a gather, no packing copy).
    pub const GATHER: Features = Features(1);
    /// The oldest message from a peer can be offered to a receive in place
    /// ([`crate::transport::Transport::pop_from`]: the direct receive path).
    pub const DIRECT_POP: Features = Features(2);
    /// Keys from `register` pin memory until handed back with `release`.
    pub const RELEASES_KEYS: Features = Features(4);
    /// Output waiting for room waits on something a sleeping rank can poll (a socket, a
    /// completion channel), not on a peer that only spinning notices.
    pub const POLLABLE_OUTPUT: Features = Features(8);
    /// Reaches only peers on this node, whose memory this CPU copies itself (GET is single
    /// copy, done when it returns); a device lane beside it may reach the peer's devices.
    pub const NODE_LOCAL: Features = Features(16);

    /// Whether every feature of `f` is in this set.
    pub const fn contains(self, f: Features) -> bool {
        self.0 & f.0 == f.0
    }

    /// Both sets.
    pub const fn with(self, f: Features) -> Features {
        Features(self.0 | f.0)
    }
}

impl std::fmt::Debug for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Features::GATHER, "GATHER"),
            (Features::DIRECT_POP, "DIRECT_POP"),
            (Features::RELEASES_KEYS, "RELEASES_KEYS"),
            (Features::POLLABLE_OUTPUT, "POLLABLE_OUTPUT"),
            (Features::NODE_LOCAL, "NODE_LOCAL"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(x, _)| self.contains(*x))
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("NONE")
        } else {
            f.write_str(&set.join("|"))
        }
    }
}

/// The kinds of memory a transport reads and writes, as a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kinds {
    /// Host (CPU) memory.
    pub host: bool,
    /// CUDA device memory.
    pub cuda: bool,
}

impl Kinds {
    /// Host memory only.
    pub const HOST: Kinds = Kinds {
        host: true,
        cuda: false,
    };
    /// Device memory only.
    pub const CUDA: Kinds = Kinds {
        host: false,
        cuda: true,
    };
    /// No memory.
    pub const NONE: Kinds = Kinds {
        host: false,
        cuda: false,
    };

    /// Whether memory of `kind` is in the set.
    pub const fn has(self, kind: crate::mem::MemKind) -> bool {
        match kind {
            crate::mem::MemKind::Host => self.host,
            crate::mem::MemKind::Cuda { .. } => self.cuda,
        }
    }

    /// Whether every kind of `k` is in this set.
    pub const fn contains(self, k: Kinds) -> bool {
        (self.host || !k.host) && (self.cuda || !k.cuda)
    }
}

/// What a transport can do, for the protocol layer's choices and the cost model
/// (`time ≈ latency + bytes / bandwidth`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// One-way latency of a small message, seconds (a hint the tuner may read).
    pub latency_s: f64,
    /// Streaming bandwidth, bytes per second (a hint the tuner may read).
    pub bandwidth_bps: f64,
    /// Largest message sent eagerly (header and payload in one go); larger ones use rendezvous.
    pub eager_limit: usize,
    /// Largest payload one `try_send` accepts (eager messages and data chunks).
    pub max_frame: usize,
    /// The operations offered.
    pub ops: Ops,
    /// The memory kinds the operations read and write.
    pub kinds: Kinds,
    /// Whether GET/PUT need the memory registered first ([`crate::net::Net::register`]); a
    /// transport without it packs a remote key from the address alone.
    pub needs_reg: bool,
    /// Bytes of a packed remote key (at most [`crate::mem::RKEY_MAX`]).
    pub rkey_len: usize,
    /// What it does beyond its operations.
    pub features: Features,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_sets_combine_and_print() {
        let o = Ops::AM.with(Ops::GET);
        assert!(o.contains(Ops::AM) && o.contains(Ops::GET) && !o.contains(Ops::PUT));
        assert!(!o.contains(Ops::AM.with(Ops::PUT)));
        assert_eq!(format!("{o:?}"), "AM|GET");
        assert_eq!(
            format!("{:?}", o.without(Ops::AM).without(Ops::GET)),
            "NONE"
        );
    }
}
