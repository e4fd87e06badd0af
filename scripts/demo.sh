#!/usr/bin/env bash
# Builds rcomm and runs the main job: a 4-rank run on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p rcomm-launcher -p rcomm-core --bins --examples
exec target/release/rcomm-run -n "${1:-4}" target/release/examples/hello
