//! Quantities with units, as `rcomm-plan` reads and prints them: counts (`70B`), sizes
//! (`80GB`), bandwidths (`900GB/s`, `400Gb/s`) and times (`1us`). Every parser names the
//! setting it reads and lists the accepted forms when the input is not one of them.

use super::PlanError;

fn bad(what: &str, input: &str, why: impl Into<String>) -> PlanError {
    PlanError::BadValue {
        what: what.to_string(),
        input: input.to_string(),
        why: why.into(),
    }
}

/// Splits `"900 GB/s"` into `(900.0, "GB/s")`: a decimal number (optionally with an exponent,
/// `1.5e9`), optional blanks, then the unit (possibly empty).
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    if i == 0 {
        return None;
    }
    // An exponent only when digits follow `e`, so that units starting with `e` stay units.
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let digits = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > digits {
            i = j;
        }
    }
    let v: f64 = s[..i].parse().ok()?;
    Some((v, s[i..].trim_start()))
}

fn checked(what: &str, input: &str, v: f64) -> Result<f64, PlanError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(bad(what, input, "out of range"))
    }
}

/// A count with an optional decimal suffix: `K` 10³, `M` 10⁶, `B` or `G` 10⁹, `T` 10¹²
/// (either case): `70B` is 7·10¹⁰, `1.3T` 1.3·10¹², `512` is 512.
///
/// ```
/// assert_eq!(rcomm_planner::parse_count("--params", "70B").unwrap(), 70e9);
/// assert!(rcomm_planner::parse_count("--params", "70X").is_err());
/// ```
pub fn parse_count(what: &str, input: &str) -> Result<f64, PlanError> {
    const FORMS: &str =
        "a number with an optional K, M, B (or G) or T suffix, e.g. 70B, 1.3T, 350M";
    let (v, unit) = split_number(input).ok_or_else(|| bad(what, input, FORMS))?;
    let scale = match unit {
        "" => 1.0,
        "K" | "k" => 1e3,
        "M" | "m" => 1e6,
        "B" | "b" | "G" | "g" => 1e9,
        "T" | "t" => 1e12,
        _ => {
            return Err(bad(
                what,
                input,
                format!("unknown suffix `{unit}`: {FORMS}"),
            ));
        }
    };
    checked(what, input, v * scale)
}

/// Scale of a byte unit (`B`, `KB`…`TB` decimal, `KiB`…`TiB` binary), `None` if it is not one.
fn byte_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

/// A size in bytes: a plain number of bytes, or a number with `B`, `KB`, `MB`, `GB`, `TB`
/// (powers of 10) or `KiB`, `MiB`, `GiB`, `TiB` (powers of 2): `80GB` is 8·10¹⁰.
///
/// ```
/// assert_eq!(rcomm_planner::parse_bytes("--gpu-mem", "80GB").unwrap(), 80e9);
/// assert_eq!(rcomm_planner::parse_bytes("--bytes", "1MiB").unwrap(), 1048576.0);
/// ```
pub fn parse_bytes(what: &str, input: &str) -> Result<f64, PlanError> {
    const FORMS: &str = "bytes, optionally with B, KB, MB, GB, TB (10^3 steps) or KiB, MiB, GiB, TiB \
                         (2^10 steps), e.g. 80GB, 64MiB, 4096";
    let (v, unit) = split_number(input).ok_or_else(|| bad(what, input, FORMS))?;
    let scale = if unit.is_empty() {
        1.0
    } else {
        byte_unit(unit)
            .ok_or_else(|| bad(what, input, format!("unknown unit `{unit}`: {FORMS}")))?
    };
    checked(what, input, v * scale)
}

/// A bandwidth in bytes per second, per direction: bytes (`B/s`, `KB/s` … `TB/s`, `KiB/s` …
/// `TiB/s`) or bits (`bit/s`, `Kb/s`, `Mb/s`, `Gb/s`, `Tb/s`, also spelt `Gbit/s` or `Gbps`)
/// per second — `GB/s` is bytes and `Gb/s` bits. Must be above zero.
///
/// ```
/// assert_eq!(rcomm_planner::parse_bandwidth("--inter-bw", "50GB/s").unwrap(), 50e9);
/// assert_eq!(rcomm_planner::parse_bandwidth("--inter-bw", "400Gb/s").unwrap(), 50e9);
/// ```
pub fn parse_bandwidth(what: &str, input: &str) -> Result<f64, PlanError> {
    const FORMS: &str = "bytes or bits per second, per direction, e.g. 900GB/s, 25GiB/s, 400Gb/s, \
                         400Gbit/s, 400Gbps";
    let (v, unit) = split_number(input).ok_or_else(|| bad(what, input, FORMS))?;
    let unknown = || bad(what, input, format!("unknown unit `{unit}`: {FORMS}"));
    let per = unit
        .strip_suffix("/s")
        .or_else(|| unit.strip_suffix("ps"))
        .ok_or_else(unknown)?;
    let scale = if let Some(s) = byte_unit(per) {
        s
    } else {
        let prefix = per
            .strip_suffix("bit")
            .or_else(|| per.strip_suffix('b'))
            .ok_or_else(unknown)?;
        let s = match prefix {
            "" => 1.0,
            "K" | "k" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            "T" => 1e12,
            _ => return Err(unknown()),
        };
        s / 8.0
    };
    let bw = checked(what, input, v * scale)?;
    if bw > 0.0 {
        Ok(bw)
    } else {
        Err(bad(what, input, "a bandwidth must be above zero"))
    }
}

/// A time in seconds, with a unit: `s`, `ms`, `us` (or `µs`), `ns`: `1us` is 10⁻⁶. A bare
/// number is refused (is `5` seconds or microseconds?).
///
/// ```
/// assert_eq!(rcomm_planner::parse_duration("--inter-lat", "5us").unwrap(), 5e-6);
/// assert!(rcomm_planner::parse_duration("--inter-lat", "5").is_err());
/// ```
pub fn parse_duration(what: &str, input: &str) -> Result<f64, PlanError> {
    const FORMS: &str = "a time with a unit: s, ms, us (or µs), ns, e.g. 1us, 2.5us, 0.5ms";
    let (v, unit) = split_number(input).ok_or_else(|| bad(what, input, FORMS))?;
    // Divided, not multiplied by 1e-6: `5us` is then exactly the double nearest 5·10⁻⁶.
    let per = match unit {
        "s" => 1.0,
        "ms" => 1e3,
        "us" | "µs" | "μs" => 1e6,
        "ns" => 1e9,
        "" => return Err(bad(what, input, format!("no unit: {FORMS}"))),
        _ => return Err(bad(what, input, format!("unknown unit `{unit}`: {FORMS}"))),
    };
    checked(what, input, v / per)
}

/// Reads a topology file: one `key = value` per line, blank lines and `#` comments ignored,
/// keys as `rcomm-plan`'s flags without the dashes (`nodes`, `gpus-per-node`, …; `_` may
/// stand for `-`). Unknown keys are left to [`Cluster::from_pairs`](super::Cluster::from_pairs)
/// to refuse; a line without `=` is an error naming its number.
///
/// ```
/// let kv = rcomm_planner::parse_key_values("# DGX-like\nnodes = 8\ngpus_per_node=8\n").unwrap();
/// assert_eq!(kv, [("nodes".to_string(), "8".to_string()), ("gpus-per-node".into(), "8".into())]);
/// ```
pub fn parse_key_values(text: &str) -> Result<Vec<(String, String)>, PlanError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(bad(
                &format!("topology file line {}", i + 1),
                line,
                "expected `key = value`",
            ));
        };
        out.push((k.trim().replace('_', "-"), v.trim().to_string()));
    }
    Ok(out)
}

/// `46.4 GB`: bytes in decimal units, three significant digits.
pub fn format_bytes(b: f64) -> String {
    scaled(
        b,
        &[(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")],
        "B",
    )
}

/// `900 GB/s`: a bandwidth in decimal byte units.
pub fn format_bandwidth(bw: f64) -> String {
    format!("{}/s", format_bytes(bw))
}

/// `3.78 s`, `12.3 ms`, `5 µs`: a time, three significant digits.
pub fn format_time(s: f64) -> String {
    if s == 0.0 {
        return "0 s".into();
    }
    let (v, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else if s >= 1e-6 {
        (s * 1e6, "µs")
    } else {
        (s * 1e9, "ns")
    };
    format!("{} {unit}", sig3(v))
}

fn scaled(v: f64, steps: &[(f64, &str)], base: &str) -> String {
    for &(s, unit) in steps {
        if v >= s {
            return format!("{} {unit}", sig3(v / s));
        }
    }
    format!("{} {base}", sig3(v))
}

/// Three significant digits, no trailing zeros: `46.4`, `900`, `1.5`.
fn sig3(v: f64) -> String {
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_decimal_suffixes() {
        assert_eq!(parse_count("x", "70B").unwrap(), 70e9);
        assert_eq!(parse_count("x", "1.3T").unwrap(), 1.3e12);
        assert_eq!(parse_count("x", "350M").unwrap(), 350e6);
        assert_eq!(parse_count("x", "7g").unwrap(), 7e9);
        assert_eq!(parse_count("x", "512").unwrap(), 512.0);
        assert_eq!(parse_count("x", "1e9").unwrap(), 1e9);
        for bad in ["", "B", "70X", "-5", "70 BB", "nan", "inf"] {
            let e = parse_count("--params", bad).unwrap_err().to_string();
            assert!(e.contains("--params"), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_know_decimal_and_binary_units() {
        assert_eq!(parse_bytes("x", "80GB").unwrap(), 80e9);
        assert_eq!(parse_bytes("x", "80 GB").unwrap(), 80e9);
        assert_eq!(parse_bytes("x", "64MiB").unwrap(), 64.0 * 1048576.0);
        assert_eq!(parse_bytes("x", "4096").unwrap(), 4096.0);
        assert_eq!(parse_bytes("x", "1KB").unwrap(), 1000.0);
        assert!(parse_bytes("x", "80Gb").is_err(), "bits are not a size");
        assert!(parse_bytes("x", "80 gigs").is_err());
    }

    #[test]
    fn bandwidths_are_bytes_per_second_and_bits_are_divided_by_eight() {
        assert_eq!(parse_bandwidth("x", "900GB/s").unwrap(), 900e9);
        assert_eq!(parse_bandwidth("x", "50 GB/s").unwrap(), 50e9);
        assert_eq!(parse_bandwidth("x", "400Gb/s").unwrap(), 50e9);
        assert_eq!(parse_bandwidth("x", "400Gbit/s").unwrap(), 50e9);
        assert_eq!(parse_bandwidth("x", "400Gbps").unwrap(), 50e9);
        assert_eq!(parse_bandwidth("x", "1GiB/s").unwrap(), 1073741824.0);
        assert_eq!(parse_bandwidth("x", "8bit/s").unwrap(), 1.0);
        for bad in ["900GB", "900", "0GB/s", "GB/s", "9XB/s", "-1GB/s"] {
            let e = parse_bandwidth("--intra-bw", bad).unwrap_err().to_string();
            assert!(e.contains("--intra-bw") && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("x", "1us").unwrap(), 1e-6);
        assert_eq!(parse_duration("x", "1µs").unwrap(), 1e-6);
        assert_eq!(parse_duration("x", "2.5 ms").unwrap(), 2.5e-3);
        assert_eq!(parse_duration("x", "500ns").unwrap(), 5e-7);
        assert_eq!(parse_duration("x", "0s").unwrap(), 0.0);
        let e = parse_duration("--intra-lat", "5").unwrap_err().to_string();
        assert!(e.contains("no unit"), "{e}");
        assert!(parse_duration("x", "5 min").is_err());
    }

    #[test]
    fn key_value_files_skip_comments_and_name_bad_lines() {
        let kv = parse_key_values("a=1 # one\n\n  # all comment\nb_c = 2GB/s\n").unwrap();
        assert_eq!(
            kv,
            [("a".into(), "1".into()), ("b-c".into(), "2GB/s".into())]
        );
        let e = parse_key_values("a=1\nnodes 8\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn formatting_keeps_three_digits() {
        assert_eq!(format_bytes(46_400_000_000.0), "46.4 GB");
        assert_eq!(format_bytes(80e9), "80 GB");
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bandwidth(900e9), "900 GB/s");
        assert_eq!(format_time(3.784), "3.78 s");
        assert_eq!(format_time(0.0123), "12.3 ms");
        assert_eq!(format_time(5e-6), "5 µs");
        assert_eq!(format_time(0.0), "0 s");
    }
}
