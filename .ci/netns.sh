#!/usr/bin/env bash
# Pretend hosts for goshmem's multi-host tests: network namespaces g1..gN,
# each with its own host name (a UTS namespace kept in a file) and one
# address 10.77.0.i/24 on a veth whose other end sits on a bridge in the
# namespace gbr. Nothing is added to the root namespace and no route
# leaves the namespaces; traffic goes only to 10.77.0.0/24.
#
#   netns.sh up N | down N | run HOST CMD... | partition A B | loss HOST PCT | heal HOST
#
# Needs root, iproute2 and util-linux (nsenter, unshare); partition and
# loss need nftables.
set -euo pipefail
cmd=${1:?usage: netns.sh up N | down N | run HOST CMD... | partition A B | loss HOST PCT | heal HOST}
shift
uts=/run/goshmem-uts
case "$cmd" in
up)
	n=${1:-2}
	ip netns add gbr
	ip -n gbr link add br0 type bridge
	ip -n gbr link set br0 up
	mkdir -p "$uts"
	for i in $(seq 1 "$n"); do
		ip netns add "g$i"
		ip link add "veth$i" netns "g$i" type veth peer name "port$i" netns gbr
		ip -n gbr link set "port$i" master br0
		ip -n gbr link set "port$i" up
		ip -n "g$i" addr add "10.77.0.$i/24" dev "veth$i"
		ip -n "g$i" link set "veth$i" up
		ip -n "g$i" link set lo up
		touch "$uts/g$i"
		unshare --uts="$uts/g$i" hostname "g$i"
	done ;;
down)
	n=${1:-2}
	for i in $(seq 1 "$n"); do
		ip netns pids "g$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
		ip netns del "g$i" 2>/dev/null || true
		umount "$uts/g$i" 2>/dev/null || true
		rm -f "$uts/g$i"
	done
	ip netns del gbr 2>/dev/null || true
	rmdir "$uts" 2>/dev/null || true ;;
run)
	h=$1
	shift
	exec nsenter --net="/run/netns/$h" --uts="$uts/$h" -- "$@" ;;
partition)
	a=$1 b=$2
	ip netns exec "$a" nft add table inet goshfault
	ip netns exec "$a" nft "add chain inet goshfault out { type filter hook output priority 0; policy accept; }"
	ip netns exec "$a" nft "add chain inet goshfault in { type filter hook input priority 0; policy accept; }"
	ip netns exec "$a" nft add rule inet goshfault out ip daddr "10.77.0.${b#g}" drop
	ip netns exec "$a" nft add rule inet goshfault in ip saddr "10.77.0.${b#g}" drop ;;
loss)
	h=$1 pct=$2
	ip netns exec "$h" nft add table inet goshfault
	ip netns exec "$h" nft "add chain inet goshfault out { type filter hook output priority 0; policy accept; }"
	ip netns exec "$h" nft add rule inet goshfault out ip daddr 10.77.0.0/24 numgen random mod 100 '<' "$pct" drop ;;
heal)
	ip netns exec "$1" nft delete table inet goshfault 2>/dev/null || true ;;
*)
	echo "netns.sh: unknown command $cmd" >&2
	exit 2 ;;
esac
