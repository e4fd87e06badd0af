//! What the benchmark CLI tests share: reading the JSON rows the pt2pt programs print.

/// Whether a printed figure (`key`: `latency_us` or `bandwidth_MBps`) is right: finite and
/// positive; except that below 1 KiB a bandwidth printed with two decimals may read 0.00 MB/s on
/// a loaded machine (a window of 64 messages taking over 13 ms).
pub fn figure_ok(key: &str, size: usize, v: f64) -> bool {
    v.is_finite() && (v > 0.0 || (key == "bandwidth_MBps" && size < 1024 && v == 0.0))
}

/// `{"size":N,"KEY":X}` → (N, X); other fields after them (rcomm-bench adds
/// `"memory":"host"` or `"device"`) are allowed.
pub fn json_row(line: &str, key: &str) -> Option<(usize, f64)> {
    let rest = line.strip_prefix("{\"size\":")?.strip_suffix('}')?;
    let (size, rest) = rest.split_once(&format!(",\"{key}\":"))?;
    let value = rest.split_once(',').map_or(rest, |(v, _)| v);
    Some((size.parse().ok()?, value.parse().ok()?))
}

/// The string field `key` of a JSON row (`"memory":"device"` → `device`).
#[allow(dead_code)]
pub fn json_str<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let (_, rest) = line.split_once(&format!("\"{key}\":\""))?;
    rest.split_once('"').map(|(v, _)| v)
}
