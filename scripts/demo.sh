#!/usr/bin/env bash
# Builds rcomm and runs the main job: 4 ranks on this machine exchanging checked messages
# (a token around a ring, then ping-pong with rank 0 at 8 B, 4 KiB and 1 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p rcomm-launcher -p rcomm-core --bins --examples
exec target/release/rcomm-run -n "${1:-4}" target/release/examples/pingpong
