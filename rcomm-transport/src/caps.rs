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
