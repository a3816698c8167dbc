#!/usr/bin/env bash
# e2e-topology.sh up|down|status — the network namespaces of an end-to-end UPF test.
#
#   netns ue                          netns upf                          netns dn
#  ┌──────────────────────────┐      ┌───────────────────────────┐      ┌─────────────────────────┐
#  │ uetun  TUN, the UE addrs │      │                           │      │                         │
#  │   default route → uetun  │  N3  │                           │  N6  │                         │
#  │ n3-gnb 192.168.3.2/24 ───┼──────┼─ n3-upf 192.168.3.1/24    │      │                         │
#  │ n4-smf 192.168.4.2/24 ───┼──────┼─ n4-upf 192.168.4.1/24    │      │                         │
#  │                          │  N4  │   n6-upf 192.168.6.1/24 ──┼──────┼─ n6-dn 192.168.6.2/24   │
#  │ upf-loadgen gnb (SMF +   │      │ upf run                   │      │ 10.60.0.0/16 via        │
#  │   gNB emulator), ping,   │      │                           │      │   192.168.6.1           │
#  │   iperf3 -c, curl        │      │                           │      │ iperf3 -s, a web server │
#  └──────────────────────────┘      └───────────────────────────┘      └─────────────────────────┘
#
# N4 (PFCP) has a link of its own so that a UPF that takes over its N3 interface with AF_XDP or
# AF_PACKET does not swallow it. uetun is a persistent TUN (IFF_TUN, no packet info):
# `upf-loadgen gnb --tun uetun` attaches to it and adds the UE addresses it established.
# Checksum offload is turned off on the veths (if ethtool is there) so that a UPF reading raw
# frames (AF_PACKET, AF_XDP) sees complete checksums. IP forwarding is on in `upf`, reverse-path
# filtering off everywhere. A UPF whose N6 is a TUN routes the UE pool into it itself.
#
# A session (as root, from the repository, after `cargo build --release`):
#
#   scripts/e2e-topology.sh up
#   ip netns exec upf target/release/upf run --n4 192.168.4.1 --n3 192.168.3.1 \
#       --ue-pool 10.60.0.0/16 ...            # plus its N3 (n3-upf) and N6 (n6-upf) options
#   ip netns exec dn iperf3 -s -D
#   ip netns exec ue target/release/upf-loadgen gnb --n4 192.168.4.1 --local 192.168.3.2 \
#       --tun uetun --sessions 4 --ue-pool 10.60.0.0/16 &
#   ip netns exec ue ping -c 3 -I 10.60.0.1 192.168.6.2
#   ip netns exec ue iperf3 -c 192.168.6.2 -B 10.60.0.1 -t 5
#   scripts/e2e-topology.sh down
#
# Environment: UE_NS, UPF_NS, DN_NS (namespace names: ue, upf, dn), UE_POOL (10.60.0.0/16),
# TUN (uetun), VETH_QUEUES (1: the RX/TX queues of every veth; AF_XDP needs one per worker).
# Needs iproute2; ethtool optional.
set -euo pipefail

UE_NS=${UE_NS:-ue}
UPF_NS=${UPF_NS:-upf}
DN_NS=${DN_NS:-dn}
UE_POOL=${UE_POOL:-10.60.0.0/16}
TUN=${TUN:-uetun}
VETH_QUEUES=${VETH_QUEUES:-1}

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

offload_off() {
    local ns=$1 dev=$2
    if command -v ethtool >/dev/null; then
        in_ns "$ns" ethtool -K "$dev" tx off rx off >/dev/null 2>&1 || true
    fi
}

sysctls() {
    local ns=$1
    in_ns "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
}

down() {
    for ns in "$UE_NS" "$UPF_NS" "$DN_NS"; do
        if [ -e "/var/run/netns/$ns" ]; then
            ip netns del "$ns"
        fi
    done
}

veth() {
    # veth NS_A DEV_A ADDR_A NS_B DEV_B ADDR_B
    local q=()
    if [ "$VETH_QUEUES" -gt 1 ]; then
        q=(numtxqueues "$VETH_QUEUES" numrxqueues "$VETH_QUEUES")
    fi
    ip link add "$2" netns "$1" "${q[@]}" type veth peer name "$5" netns "$4" "${q[@]}"
    in_ns "$1" ip addr add "$3" dev "$2"
    in_ns "$4" ip addr add "$6" dev "$5"
    in_ns "$1" ip link set "$2" up
    in_ns "$4" ip link set "$5" up
    offload_off "$1" "$2"
    offload_off "$4" "$5"
}

up() {
    down
    for ns in "$UE_NS" "$UPF_NS" "$DN_NS"; do
        ip netns add "$ns"
        in_ns "$ns" ip link set lo up
        sysctls "$ns"
    done
    in_ns "$UPF_NS" sysctl -qw net.ipv4.ip_forward=1

    veth "$UE_NS" n3-gnb 192.168.3.2/24 "$UPF_NS" n3-upf 192.168.3.1/24
    veth "$UE_NS" n4-smf 192.168.4.2/24 "$UPF_NS" n4-upf 192.168.4.1/24
    veth "$UPF_NS" n6-upf 192.168.6.1/24 "$DN_NS" n6-dn 192.168.6.2/24

    in_ns "$UE_NS" ip tuntap add dev "$TUN" mode tun
    # The UE's MTU leaves room for the GTP-U encapsulation (outer IPv4 20 + UDP 8 + GTP-U 8 +
    # PDU Session Container 8 = 44 octets, 56 with options) on the 1500-octet N3 link, as the
    # network tells real UEs: outer fragments are not reassembled on the UPF's fast path.
    in_ns "$UE_NS" ip link set "$TUN" mtu 1400 up
    in_ns "$UE_NS" ip route add default dev "$TUN"
    # The DN answers the UEs through the UPF.
    in_ns "$DN_NS" ip route add "$UE_POOL" via 192.168.6.1
    echo "e2e topology up: netns $UE_NS (TUN $TUN, gNB 192.168.3.2, SMF 192.168.4.2)," \
        "$UPF_NS (N3 192.168.3.1, N4 192.168.4.1, N6 192.168.6.1), $DN_NS (DN 192.168.6.2)"
}

status() {
    for ns in "$UE_NS" "$UPF_NS" "$DN_NS"; do
        echo "== netns $ns"
        if [ -e "/var/run/netns/$ns" ]; then
            in_ns "$ns" ip -br addr
            in_ns "$ns" ip route
        else
            echo "(absent)"
        fi
    done
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *)
        echo "usage: $0 up|down|status" >&2
        exit 2
        ;;
esac
