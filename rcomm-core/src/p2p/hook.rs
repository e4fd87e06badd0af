//! What the engine lets a layer above watch: checked mode (`coll::check`) sees every stamped
//! message and the control messages meant for it, and leaves control messages of its own to
//! send. The engine knows only this trait, so `p2p` depends on nothing above it; the hook is
//! off the hot path (a message without a signature never reaches it).

use rcomm_runtime::wire::Header;

/// What a collective's messages carry in their headers for checked mode (all zero when
/// unchecked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// The communicator's generation (`coll_seq` slot).
    pub epoch: u32,
    /// The call's signature (`signature` slot).
    pub sig: u64,
}

/// A control message a hook wants sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HookMsg {
    /// World rank of the receiver.
    pub peer: u32,
    /// Its header.
    pub hdr: Header,
    /// Its payload, `len` bytes of it.
    pub payload: [u8; 24],
    /// Payload bytes used.
    pub len: u8,
}

/// A watcher of the engine's traffic (see the module notes).
pub(crate) trait Hook: std::any::Any + Send + std::fmt::Debug {
    /// A data message (eager or RTS) with a non-zero signature arrived from world rank `from`.
    fn on_data(&mut self, from: u32, hdr: &Header);
    /// A control message arrived; true if it was the hook's.
    fn on_control(&mut self, from: u32, hdr: &Header, payload: &[u8]) -> bool;
    /// Hands over the control messages the hook wants sent.
    fn drain(&mut self, out: &mut dyn FnMut(HookMsg));
}
