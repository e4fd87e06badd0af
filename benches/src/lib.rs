//! Benchmarks for rcomm.
//!
//! The binary `rcomm-bench` runs point-to-point benchmarks with the methodology of the OSU
//! micro-benchmarks 7.2 (`osu_latency`, `osu_bw`, `osu_bibw`); `benches/mpi/osu_like.c` is the
//! same program for an installed MPI, and `benches/scripts/compare-pt2pt.sh` runs both side by
//! side. This library holds what the two share and what can be tested without ranks: size
//! ranges, OSU's loop counts, the data pattern that the check pass verifies, page-aligned
//! buffers and the output formats.
#![warn(missing_docs)]

pub mod osu;
