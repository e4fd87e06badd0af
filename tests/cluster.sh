#!/usr/bin/env bash
# cluster.sh — fake hosts for rcomm's multi-host tests (driven by tests/src/cluster.rs).
#
#   cluster.sh up     N fake hosts: network namespaces ${P}host0.. on bridge ${P}br, addresses
#                     ${SUBNET}.(i+1)/24, each with its own sshd (own hostname via a UTS
#                     namespace, root login with a generated key only), a private ssh config
#                     naming every host (no /etc/hosts change) and an ssh wrapper ${STATE}/bin/ssh.
#   cluster.sh down   kills whatever runs in those namespaces, deletes them, the bridge, the state.
#
# Settings: RCT_PREFIX (default rcT-), RCT_SUBNET (e.g. 10.77.41), RCT_N (3), RCT_STATE dir.
# Everything stays inside namespaces this script creates; nothing is sent anywhere else. Every
# wait is bounded. `up` first removes a stale cluster of the same prefix (a crashed run).
set -euo pipefail
P=${RCT_PREFIX:-rcT-}
SUBNET=${RCT_SUBNET:?RCT_SUBNET}
N=${RCT_N:-3}
STATE=${RCT_STATE:?RCT_STATE}
BR="${P}br"

ns() { echo "${P}host$1"; }
veth() { echo "${P}v$1"; }
addr() { echo "${SUBNET}.$(( $1 + 1 ))"; }

down() {
    local i h p
    for h in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${P}host" || true); do
        for p in $(ip netns pids "$h" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    done
    for h in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${P}host" || true); do
        i=${h#"${P}host"}
        ip link del "$(veth "$i")" 2>/dev/null || true
        ip netns del "$h" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
    rm -rf "$STATE"
}

up() {
    down
    mkdir -p "$STATE/bin" /run/sshd
    chmod 700 "$STATE"
    ssh-keygen -q -t ed25519 -N '' -C rct-host -f "$STATE/host_key"
    ssh-keygen -q -t ed25519 -N '' -C rct-client -f "$STATE/id"
    cp "$STATE/id.pub" "$STATE/authorized_keys"
    chmod 600 "$STATE/authorized_keys"
    {
        for ((i = 0; i < N; i++)); do printf 'Host host%d\n  HostName %s\n' "$i" "$(addr $i)"; done
        # An address on the bridge's subnet that nobody holds: a host that is down.
        printf 'Host unreachable\n  HostName %s.200\n' "$SUBNET"
        cat <<CONF
Host *
  User root
  IdentityFile $STATE/id
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 3
CONF
    } > "$STATE/ssh_config"
    printf '#!/bin/sh\nexec ssh -F %s "$@"\n' "$STATE/ssh_config" > "$STATE/bin/ssh"
    chmod 755 "$STATE/bin/ssh"
    ip link add "$BR" type bridge
    ip link set "$BR" up
    for ((i = 0; i < N; i++)); do
        local h; h=$(ns $i)
        ip netns add "$h"
        ip link add "$(veth $i)" type veth peer name eth0 netns "$h"
        ip link set "$(veth $i)" master "$BR" up
        ip -n "$h" addr add "$(addr $i)/24" dev eth0
        ip -n "$h" link set eth0 up
        ip -n "$h" link set lo up
        cat > "$STATE/sshd$i.conf" <<CONF
Port 22
ListenAddress $(addr $i)
HostKey $STATE/host_key
PidFile $STATE/sshd$i.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 100
ClientAliveInterval 2
ClientAliveCountMax 3
LogLevel ERROR
CONF
        # Own UTS namespace: the host's sessions see hostname host$i.
        nsenter --net="/run/netns/$h" unshare --uts -- \
            sh -c 'hostname "$1" && exec /usr/sbin/sshd -f "$2" -E "$3"' sh "host$i" \
            "$STATE/sshd$i.conf" "$STATE/sshd$i.log"
    done
    for ((i = 0; i < N; i++)); do
        local ok=""
        for _ in $(seq 50); do
            if nsenter --net="/run/netns/$(ns 0)" bash -c "exec 3<>/dev/tcp/$(addr $i)/22" 2>/dev/null; then ok=1; break; fi
            sleep 0.1
        done
        [ -n "$ok" ] || { echo "sshd of $(ns $i) does not answer; see $STATE/sshd$i.log" >&2; exit 1; }
    done
}

[ "$(id -u)" = 0 ] || { echo "cluster.sh: must run as root" >&2; exit 1; }
case "${1:-}" in
    up) up ;;
    down) down ;;
    *) echo "usage: cluster.sh up|down" >&2; exit 2 ;;
esac
