//! Benchmarks for rcomm.
//!
//! The binary `rcomm-bench` runs point-to-point benchmarks with the methodology of the OSU
//! micro-benchmarks 7.2 (`rcomm-bench pt2pt`: `osu_latency`, `osu_bw`, `osu_bibw`) and
//! collective benchmarks with that of nccl-tests (`rcomm-bench coll OP`: `all_reduce_perf` &
//! co.); `benches/mpi/osu_like.c` is the same program for an installed MPI, and
//! `benches/scripts/compare-pt2pt.sh` / `compare-coll.sh` run both side by side. This library
//! holds what they share and what can be tested without ranks ([`osu`]: size ranges, OSU's
//! loop counts, the data pattern that the check pass verifies, page-aligned buffers, output
//! formats; [`coll`]: nccl-tests' counts, bus bandwidth factors, columns and number formats,
//! the check data and its sequential reference; [`plot`]: the SVG plot), and the rank side of
//! the collective benchmark ([`coll_run`]) and of the overlap benchmark (`rcomm-bench overlap`:
//! a non-blocking allreduce against computation, [`overlap`]), and the per-rank timing test
//! that names slow ranks (`rcomm-bench --straggler`, [`straggler`]); [`device`]: device buffers
//! for `pt2pt --device` (and the device choice for `coll --device`, whose loop is
//! [`coll_run`]'s) and the single-process device copy baseline `rcomm-bench dtod`.
#![warn(missing_docs)]

pub mod coll;
pub mod coll_run;
pub mod device;
pub mod osu;
pub mod overlap;
pub mod plot;
pub mod reduce;
pub mod straggler;
