#!/usr/bin/env bash
# The whole test suite, as CI runs it. On a fresh Debian machine with only the Rust toolchain it
# first installs the system packages the tests need (when run as root, or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages the suite needs: MPICH's mpiexec for tests/tests/launchers.rs (and mpicc with
# libclang for bindgen, which rsmpi's mpi-sys build needs when tests/tests/rsmpi_items.rs
# documents rsmpi to compare it with rcomm-mpi item by item) (Slurm, munge are
# installed below by the launcher tests' own script, which keeps the packages from starting system
# daemons); the multi-host tests (tests/tests/multihost.rs) make fake hosts of network namespaces,
# each with its own sshd (tests/cluster.sh); hwloc's library and tools for rcomm-runtime's
# feature `hwloc` (its topology tests compare rcomm's sysfs reader with hwloc); rdma-core's
# libibverbs and verbs.h for the ib backend's tests (rcomm-transport/tests/ib_abi.rs compares
# its struct copies with the header and loads the run-time-loaded libibverbs.so.1); Python with
# venv, pip and its headers for the wheels fetched below and mpi4py's suite (tests/mpi4py/run.py
# builds mpi4py from its sdist in a venv of its own).
PKGS=(mpich libclang-dev openssh-server openssh-client iproute2 util-linux libhwloc-dev libudev-dev hwloc pkg-config libibverbs-dev ibverbs-providers python3 python3-venv python3-pip python3-dev)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    # Keep the install from starting a system-wide sshd: the tests start their own, inside
    # their namespaces only.
    guard=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod 755 /usr/sbin/policy-rc.d
        guard=1
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
    if [ -n "$guard" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi

if [ "$(id -u)" -eq 0 ]; then
    tests/scripts/slurm-local.sh install
fi

# NVRTC, for the device reductions' compile test (kernels/tests/nvrtc.rs): the
# nvidia-cuda-nvrtc wheel from PyPI, unpacked beside the build (downloaded once per target dir;
# no system Python package is installed) and put on LD_LIBRARY_PATH, where rcomm finds it at run
# time as it would a CUDA installation's.
nvrtc_dir="${CARGO_TARGET_DIR:-target}/nvrtc"
nvrtc_whl=nvidia_cuda_nvrtc_cu12-12.9.86-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl
if [ "$(uname -m)" = x86_64 ] && [ ! -e "$nvrtc_dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
    mkdir -p "$nvrtc_dir"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$nvrtc_dir" nvidia-cuda-nvrtc-cu12==12.9.86
    python3 -m zipfile -e "$nvrtc_dir/$nvrtc_whl" "$nvrtc_dir"
    rm -f "$nvrtc_dir/$nvrtc_whl"
fi
export LD_LIBRARY_PATH="$(cd "$nvrtc_dir" 2>/dev/null && pwd)/nvidia/cuda_nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# MPICH's MPI-5.0 ABI header and library, for rcomm-abi's tests (the published mpi_abi.h its
# constants are checked against; a binary built against MPICH's libmpi_abi.so.1 run on rcomm):
# the mpich wheel from PyPI, unpacked beside the build once per target dir; the tests find it
# through MPICH_WHEEL_DIR.
mpich_dir="${CARGO_TARGET_DIR:-target}/mpich"
mpich_data=mpich-5.0.2.data/data
if [ "$(uname -m)" = x86_64 ] && [ ! -e "$mpich_dir/$mpich_data/include/mpi_abi.h" ]; then
    mkdir -p "$mpich_dir"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$mpich_dir" mpich==5.0.2
    python3 -m zipfile -e "$mpich_dir"/mpich-5.0.2-*.whl "$mpich_dir"
    rm -f "$mpich_dir"/mpich-5.0.2-*.whl
fi
export MPICH_WHEEL_DIR="$(cd "$mpich_dir" 2>/dev/null && pwd)/$mpich_data"

# The suite (rcomm-runtime with its feature hwloc; a plain `cargo build` needs no hwloc), then
# loom's model checks of the shared-memory ring protocol (rcomm-transport's shm::loom tests). `--cfg loom` changes every crate's flags, so those build in their own target
# dir; release, because loom explores ~170,000 executions. Both run; the script fails if either does.
# Every skipped test says so on the terminal (rcomm-testkit writes past libtest's capture) and
# appends a line here; the list is repeated at the end, where a person reads. Under CI a skip
# is a failure, except for hardware this machine lacks (GPU, InfiniBand, a CPU ISA).
skips=$(mktemp "${TMPDIR:-/tmp}/rcomm-test-skips.XXXXXX")
trap 'rm -f "$skips"' EXIT
export RCOMMTEST_SKIP_LOG="$skips"
status=0
# A fresh clone under CI rebuilds everything once: incremental state would only fill the disk.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
cargo test --workspace --locked --no-fail-fast --features rcomm-runtime/hwloc "$@" || status=$?
RUSTFLAGS="${RUSTFLAGS:-} --cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
    cargo test --locked -p rcomm-transport --lib --release shm::loom || status=$?
# The book: built with mdBook (installed once into target/tools when the machine lacks it; its
# Rust samples ran above as rcomm-core's doctests).
mdbook=$(command -v mdbook || true)
if [ -z "$mdbook" ]; then
    tools="${CARGO_TARGET_DIR:-target}/tools"
    [ -x "$tools/bin/mdbook" ] ||
        cargo install -q --locked --no-default-features --version 0.4.52 --root "$tools" mdbook || status=$?
    mdbook="$tools/bin/mdbook"
fi
"$mdbook" build book || status=$?
# Every library crate packages: versions on its path dependencies, metadata, README (the
# packaged crates' own build was checked once without --no-verify; it rebuilds the world).
cargo package -q --no-verify --allow-dirty -p rcomm-kernels -p rcomm-runtime -p rcomm-transport \
    -p rcomm-planner -p rcomm-core -p rcomm-mpi -p rcomm-mpi-derive -p rcomm-launcher -p rcomm-abi || status=$?
# A user's project with its own lockfile: rcomm, rcomm-mpi and the launcher built with every
# direct dependency at the lowest version the manifests declare, then run as 2 ranks.
scripts/downstream-check.sh || status=$?
if [ -s "$skips" ]; then
    echo
    echo "=== $(wc -l <"$skips") test(s) skipped (CI=${CI:-unset}):"
    sort "$skips"
else
    echo
    echo "=== no test skipped (CI=${CI:-unset})"
fi
exit "$status"
