//! Collective call numbers and the tags they travel under on the internal context: the
//! executor makes the tags, checked mode reads the call numbers back.

/// Collective tags start here on the internal context (below: barrier, allgather of ids, ...).
pub(crate) const TAG_COLL_BASE: i32 = 16;
/// Collective tags run over `TAG_COLL_BASE + seq mod 2³⁰`.
const SEQ_MOD: i64 = 1 << 30;

/// Whether tag `a` names a later call than tag `b` (sequence numbers wrap).
pub(crate) fn later(a: i32, b: i32) -> bool {
    let d = (i64::from(a) - i64::from(b)).rem_euclid(SEQ_MOD);
    d != 0 && d < SEQ_MOD / 2
}

/// The call number a tag stands for.
pub(crate) fn seq_of(tag: i32) -> u32 {
    (i64::from(tag) - i64::from(TAG_COLL_BASE)).rem_euclid(SEQ_MOD) as u32
}
