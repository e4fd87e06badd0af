//! `NCCL_STANDIN_FAULT`: the faults rcomm's tests inject into a rank process. `exit@N`: the
//! process `_exit(137)`s when it is about to take part in its N-th collective (counting from
//! 1 over every communicator of the process); `hang@N`: it never takes part in that one and
//! stays alive (only `ncclCommAbort` of its communicator ends the wait).

use crate::abi::Fail;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable.
pub const VAR: &str = "NCCL_STANDIN_FAULT";

/// An injected fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `exit@N`.
    Exit(u64),
    /// `hang@N`.
    Hang(u64),
}

/// What to do before the next collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Take part.
    Go,
    /// `_exit(137)`.
    Exit,
    /// Never take part.
    Hang,
}

/// The fault a value of [`VAR`] asks for (unset or empty: none).
pub fn parse(v: Option<&str>) -> Result<Option<Fault>, Fail> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let wrong = || {
        Fail::usage(format!(
            "{VAR}={v:?}: expected exit@N or hang@N with N a collective's number from 1"
        ))
    };
    let (what, n) = v.split_once('@').ok_or_else(wrong)?;
    let n: u64 = n.trim().parse().map_err(|_| wrong())?;
    if n == 0 {
        return Err(wrong());
    }
    match what.trim() {
        "exit" => Ok(Some(Fault::Exit(n))),
        "hang" => Ok(Some(Fault::Hang(n))),
        _ => Err(wrong()),
    }
}

/// This process's fault, read once.
pub fn fault() -> Result<Option<Fault>, Fail> {
    static F: OnceLock<Result<Option<Fault>, Fail>> = OnceLock::new();
    F.get_or_init(|| parse(std::env::var(VAR).ok().as_deref()))
        .clone()
}

/// Counts one more collective of this process and says what to do before it.
pub fn next_collective() -> Action {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst) + 1;
    match fault() {
        Ok(Some(Fault::Exit(k))) if k == n => Action::Exit,
        Ok(Some(Fault::Hang(k))) if k == n => Action::Hang,
        _ => Action::Go,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_faults_parse_and_anything_else_is_refused_by_name() {
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some(" ")), Ok(None));
        assert_eq!(parse(Some("exit@3")), Ok(Some(Fault::Exit(3))));
        assert_eq!(parse(Some("hang@ 1")), Ok(Some(Fault::Hang(1))));
        for bad in ["exit", "exit@0", "exit@x", "die@2", "@2"] {
            let e = parse(Some(bad)).unwrap_err();
            assert!(
                e.text.contains(VAR) && e.text.contains("exit@N"),
                "{bad}: {e:?}"
            );
        }
    }
}
