//! Test-only helpers every rcomm crate's tests share: the one rule for skipping a test.
//!
//! A test that cannot run here (no root for network namespaces, no MPI installed, no GPU)
//! calls [`skip`] or [`skip_hardware`] and returns. Either one says so where a person running
//! the suite sees it — on the terminal, past libtest's output capture, which swallows
//! `eprintln!` of a passing test — and appends a line to the file named by
//! `RCOMMTEST_SKIP_LOG`, which `scripts/test.sh` prints as a summary at the end. Under CI
//! ([`under_ci`]) every prerequisite must have been installed, so [`skip`] fails the test;
//! only missing hardware that no CI machine here has (GPU, InfiniBand, a CPU feature) may
//! skip there ([`skip_hardware`]).

use std::io::Write;

/// The variable `scripts/test.sh` points at a file collecting every skip of a run (not
/// `RCOMM_…`: ranks warn about every unknown variable of theirs).
pub const SKIP_LOG_VAR: &str = "RCOMMTEST_SKIP_LOG";

/// Whether the suite runs under CI: `CI` set to anything but empty, `0` or `false` (GitHub,
/// GitLab and `.ci/run` set `CI=true`).
pub fn under_ci() -> bool {
    ci_value_means_ci(std::env::var("CI").ok().as_deref())
}

/// The rule of [`under_ci`] on a value of `CI` (`None`: unset).
pub fn ci_value_means_ci(v: Option<&str>) -> bool {
    v.is_some_and(|v| {
        let v = v.trim();
        !(v.is_empty() || v == "0" || v.eq_ignore_ascii_case("false"))
    })
}

/// Skips the calling test because a prerequisite is missing (`why` says which, and how to get
/// it), or — under CI, where everything the suite needs is installed — fails it.
#[track_caller]
pub fn skip(why: &str) {
    if under_ci() {
        panic!("CI is set, so this test may not be skipped: {why}");
    }
    report(why);
}

/// Skips the calling test because this machine lacks hardware (a GPU, an InfiniBand HCA, a
/// CPU instruction set): allowed under CI too, and said the same way as [`skip`].
pub fn skip_hardware(why: &str) {
    report(&format!("{why} (hardware; allowed under CI)"));
}

/// The line a skip prints: `SKIPPED <test>: <why>`.
pub fn skip_line(test: &str, why: &str) -> String {
    format!("SKIPPED {test}: {why}")
}

fn report(why: &str) {
    let thread = std::thread::current();
    // libtest names each test's thread after the test; `main` is a test run alone.
    let test = match thread.name() {
        Some(n) if n != "main" => n.to_string(),
        _ => std::env::args()
            .next()
            .unwrap_or_else(|| "a test".to_string()),
    };
    let line = skip_line(&test, why);
    // Straight to the file descriptor: `eprintln!` would be captured and dropped for a passing
    // test.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR).filter(|p| !p.is_empty()) {
        // One short write with O_APPEND: lines from parallel tests do not interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        for v in ["true", "1", "yes", "TRUE", "gitlab"] {
            assert!(ci_value_means_ci(Some(v)), "{v}");
        }
        for v in [
            None,
            Some(""),
            Some("0"),
            Some("false"),
            Some("False"),
            Some(" "),
        ] {
            assert!(!ci_value_means_ci(v), "{v:?}");
        }
    }

    #[test]
    fn a_skip_line_names_the_test_and_the_reason() {
        assert_eq!(
            skip_line("multihost::three_hosts", "needs root"),
            "SKIPPED multihost::three_hosts: needs root"
        );
    }
}
