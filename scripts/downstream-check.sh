#!/usr/bin/env bash
# Builds tests/downstream — a project with its own workspace and lockfile that adds rcomm and
# rcomm-mpi — the way a user's project with an older lockfile would: every direct dependency of
# rcomm's library crates pinned to the lowest version their manifests declare (`cargo update
# --precise`), then `cargo build --locked` with the toolchain the workspace declares as its
# `rust-version` (installed by rustup, minimal profile, when missing). A declared minimum the
# code has outgrown (an API, a feature or a language construct the declared version lacks)
# fails here.
#
#   scripts/downstream-check.sh            # pin, build, run it as 2 ranks
#   DOWNSTREAM_KEEP_LATEST=1 …             # build with the newest versions instead
#   DOWNSTREAM_TOOLCHAIN=stable …          # build with another toolchain than rust-version
#
# Cargo's -Z direct-minimal-versions would do the pinning, but needs a nightly toolchain; this
# does the same with stable cargo. The target dir is target/downstream (its own: the pinned
# versions would otherwise rebuild the workspace's).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=$root/tests/downstream
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}/downstream"
# Its own workspace, so not the workspace's profile: keep the build as small as that one.
export CARGO_PROFILE_DEV_DEBUG=line-tables-only CARGO_INCREMENTAL=0
manifest=$dir/Cargo.toml
rm -f "$dir/Cargo.lock"
cargo generate-lockfile -q --manifest-path "$manifest"
if [ -z "${DOWNSTREAM_KEEP_LATEST:-}" ]; then
    # NAME LOCKED LOWEST for each direct registry dependency of the library crates that the
    # downstream's lockfile holds (optional ones it does not enable are not in it).
    cargo metadata -q --format-version 1 --manifest-path "$manifest" |
        python3 "$root/scripts/lowest_versions.py" |
        while read -r name locked lowest; do
            if [ "$locked" != "$lowest" ]; then
                echo "pin $name $locked -> $lowest"
                cargo update -q --manifest-path "$manifest" -p "$name@$locked" --precise "$lowest"
            fi
        done
fi
# The oldest toolchain the workspace claims to build with.
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n1)
toolchain=${DOWNSTREAM_TOOLCHAIN:-$msrv}
if [ -z "$toolchain" ]; then
    echo "downstream check: no rust-version in $root/Cargo.toml" >&2
    exit 1
fi
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1; then
    command -v rustup >/dev/null || {
        echo "downstream check: rustup is needed to install toolchain $toolchain" >&2
        exit 1
    }
    echo "installing toolchain $toolchain (the declared rust-version)"
    rustup toolchain install "$toolchain" --profile minimal --no-self-update >/dev/null
fi
echo "building with $(rustup run "$toolchain" rustc --version)"
cargo "+$toolchain" build -q --locked --manifest-path "$manifest"
# The launcher's binaries, as `cargo install` builds them, against the same pinned versions.
cargo "+$toolchain" build -q --locked --manifest-path "$manifest" -p rcomm-launcher --bins
# It runs: two ranks on this machine, started by the launcher built above.
"$CARGO_TARGET_DIR/debug/rcomm-run" -n 2 "$CARGO_TARGET_DIR/debug/rcomm-downstream"
echo "downstream build with the lowest declared versions and Rust $toolchain: ok"
