#!/usr/bin/env bash
# A private one-node Slurm cluster on localhost for rcomm's launcher tests (tests/tests/launchers.rs).
#
#   slurm-local.sh install        apt-get install slurmctld slurmd slurm-client munge if missing
#                                 (exit 77 when not root and they are missing: the caller skips)
#   slurm-local.sh up STATE CTLD_PORT SLURMD_PORT
#                                 own munge key + socket, slurm.conf, state, spool, logs, all under
#                                 STATE; daemons as root; waits (bounded) until the node is idle
#   slurm-local.sh down STATE     cancel jobs, stop slurmd, slurmctld, munged by their pid files,
#                                 kill leftover slurmstepd of this cluster, remove STATE
#
# Nothing under /etc is changed and no system service is started: the packages' postinst is kept
# from starting daemons with a temporary policy-rc.d. No cgroups: proctrack/linuxproc,
# task/none. Every step is time-bounded. Gotchas (also seen in the team's shared recipe):
# a dead rank leaves the others blocked in the PMI fence unless srun --kill-on-bad-exit=1.
set -euo pipefail

die() { echo "slurm-local: $*" >&2; exit 1; }

install() {
    local missing=()
    [ -x /usr/sbin/slurmctld ] || missing+=(slurmctld)
    [ -x /usr/sbin/slurmd ] || missing+=(slurmd)
    command -v srun >/dev/null 2>&1 || missing+=(slurm-client)
    command -v munged >/dev/null 2>&1 || missing+=(munge)
    [ ${#missing[@]} = 0 ] && return 0
    [ "$(id -u)" = 0 ] || { echo "not root and ${missing[*]} missing" >&2; exit 77; }
    local guard=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; guard=1
    fi
    local rc=0
    export DEBIAN_FRONTEND=noninteractive
    { timeout 300 apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      { timeout 300 apt-get update >/dev/null 2>&1 &&
        timeout 300 apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; }; } || rc=$?
    [ -n "$guard" ] && rm -f /usr/sbin/policy-rc.d
    [ $rc = 0 ] || die "apt-get install ${missing[*]} failed"
}

up() {
    local state=$1 ctld_port=$2 slurmd_port=$3 t cpus
    # At least 8 CPUs claimed (config_overrides lets slurmd believe the file), so `srun -n 4`
    # runs on a 2-core machine without --overcommit.
    cpus=$(nproc); [ "$cpus" -ge 8 ] || cpus=8
    [ "$(id -u)" = 0 ] || die "must run as root"
    mkdir -p "$state"/{state,log,spool/localhost,tmp/localhost,munge}
    chmod 711 "$state/munge"
    dd if=/dev/urandom of="$state/munge/munge.key" bs=1 count=128 status=none
    chmod 400 "$state/munge/munge.key"
    # -f: munged refuses to run as root otherwise. Slurm finds the socket via AuthInfo.
    munged -f --key-file="$state/munge/munge.key" --socket="$state/munge/munge.socket.2" \
        --pid-file="$state/munge/munged.pid" --log-file="$state/munge/munged.log" \
        --seed-file="$state/munge/munged.seed"
    for t in $(seq 50); do [ -S "$state/munge/munge.socket.2" ] && break; sleep 0.1; done
    cat > "$state/slurm.conf" <<CONF
ClusterName=rcommtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$state/munge/munge.socket.2
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$state/state
SlurmdSpoolDir=$state/spool/%n
TmpFS=$state/tmp/%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
InactiveLimit=0
KillWait=2
MinJobAge=30
PlugStackConfig=$state/plugstack.conf
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=30 State=UP OverSubscribe=FORCE:8
CONF
    : > "$state/plugstack.conf"
    export SLURM_CONF="$state/slurm.conf"
    slurmctld -f "$SLURM_CONF" -i
    slurmd -f "$SLURM_CONF" -N localhost
    for t in $(seq 150); do
        [ "$(sinfo -h -t idle -o %D 2>/dev/null || true)" = 1 ] && return 0
        sleep 0.1
    done
    sinfo -N >&2 || true
    tail -n 20 "$state/log/"*.log >&2 || true
    die "node not idle after 15 s"
}

alive() {   # alive STATE PIDFILE -> pid if that process exists and its command line names STATE
    local p; [ -f "$2" ] || return 1; p=$(cat "$2"); [ -n "$p" ] || return 1
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "$1" || return 1
    echo "$p"
}

down() {
    local state=$1 f p t
    [ -d "$state" ] || return 0
    export SLURM_CONF="$state/slurm.conf"
    if alive "$state" "$state/slurmctld.pid" >/dev/null; then
        timeout 10 scancel --quiet -u root 2>/dev/null || true
        for t in $(seq 25); do [ -z "$(timeout 5 squeue -h 2>/dev/null || true)" ] && break; sleep 0.2; done
    fi
    for f in "$state/slurmd.pid" "$state/slurmctld.pid" "$state/munge/munged.pid"; do
        p=$(alive "$state" "$f") && kill "$p" 2>/dev/null || true
    done
    for t in $(seq 20); do
        local any=""
        for f in "$state/slurmd.pid" "$state/slurmctld.pid" "$state/munge/munged.pid"; do
            alive "$state" "$f" >/dev/null && any=1
        done
        [ -z "$any" ] && break; sleep 0.1
    done
    for f in "$state/slurmd.pid" "$state/slurmctld.pid" "$state/munge/munged.pid"; do
        p=$(alive "$state" "$f") && kill -KILL "$p" 2>/dev/null || true
    done
    # Job steps of this cluster that outlived slurmd: slurmstepd processes with files under STATE.
    for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
        ls -l "/proc/$p/fd" 2>/dev/null | grep -q "$state" && kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$state"
}

case "${1:-}" in
    install) install ;;
    up) [ $# = 4 ] || die "usage: up STATE CTLD_PORT SLURMD_PORT"; up "$2" "$3" "$4" ;;
    down) [ $# = 2 ] || die "usage: down STATE"; down "$2" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
