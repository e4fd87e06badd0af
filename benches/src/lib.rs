//! Benchmarks: `rcomm-bench` arrives with point-to-point (issue P2).
