#!/usr/bin/env bash
# A host that drops off the network mid-job, played on one machine: two network
# namespaces ("hosts" hosta and hostb, each with its own host name and /etc/hosts) joined
# by a veth pair, one rank in each over tcp;ofi_rxm; after CUT seconds everything hostb
# sends is dropped (a blackhole route: hostb falls silent as a host that lost power or its
# network would; its link stays up) — nothing is closed, no process dies. Prints each rank's last words and when they
# came. Needs root, iproute2 and util-linux (unshare).
#
#   sudo deploy/host-down.sh [BIN_DIR] [CUT]     # BIN_DIR: target/release; CUT: 2 (s)
#
# Each rank should be named by the other within about 5 s of the cut (the liveness
# connection's keepalive probes); the operation timeout (op_timeout, 30 s) is the fallback.
set -euo pipefail
bin="${1:-target/release}"
cut="${2:-2}"
[ "$(id -u)" -eq 0 ] || { echo "host-down: run as root (it makes network namespaces)" >&2; exit 2; }
command -v unshare >/dev/null || { echo "host-down: no unshare (util-linux)" >&2; exit 2; }
[ -x "$bin/runtime-bench" ] || { echo "host-down: no $bin/runtime-bench (cargo build --release)" >&2; exit 2; }
bin="$(cd "$bin" && pwd)"
a="titus-hd-a-$$"; b="titus-hd-b-$$"; va="thda$$"; vb="thdb$$"
out="$(mktemp -d)"
cleanup() {
  kill "${p0:-}" "${p1:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  ip netns delete "$a" 2>/dev/null || true
  ip netns delete "$b" 2>/dev/null || true
  rm -rf "/etc/netns/$a" "/etc/netns/$b" "$out"
  rmdir /etc/netns 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "$va" netns "$a" type veth peer name "$vb" netns "$b"
ip -n "$a" addr add 10.213.0.1/24 dev "$va"; ip -n "$b" addr add 10.213.0.2/24 dev "$vb"
for n in "$a" "$b"; do
  ip -n "$n" link set lo up
  mkdir -p "/etc/netns/$n"
  printf '127.0.0.1 localhost\n10.213.0.1 hosta\n10.213.0.2 hostb\n' >"/etc/netns/$n/hosts"
done
ip -n "$a" link set "$va" up; ip -n "$b" link set "$vb" up
# A rank opens on the interfaces up when it starts: wait for both ends' carrier.
for i in $(seq 50); do
  ip -n "$a" link show "$va" | grep -q LOWER_UP && ip -n "$b" link show "$vb" | grep -q LOWER_UP && break
  sleep 0.1
done
secret="hd-$$-$RANDOM"
rank() { # rank, namespace, host, interface
  ip netns exec "$2" unshare --uts sh -c 'hostname "$0"; exec "$@"' "$3" \
    env TITUS_LOG="${HD_LOG:-warn}" FI_LOG_LEVEL="${HD_FI_LOG:-}" TITUS_RANK="$1" TITUS_SIZE=2 TITUS_BOOTSTRAP=10.213.0.1:17911 TITUS_JOB_SECRET="$secret" \
    TITUS_PROVIDER="tcp;ofi_rxm" TITUS_NODE_ID="$3" \
    ${HD_WRAP:-} "$bin/runtime-bench" --tasks 20000 --task-ms 1 --protocol claim >"$out/$1" 2>&1
}
start=$(date +%s.%N)
rank 0 "$a" hosta "$va" & p0=$!
rank 1 "$b" hostb "$vb" & p1=$!
sleep "$cut"
ip -n "$b" route add blackhole 10.213.0.1/32
t_cut=$(date +%s.%N); [ -n "${HD_VERBOSE:-}" ] && date -u +"cut at %T.%N"
echo "host-down: hostb cut off $(echo "$t_cut - $start" | bc) s after the start"
for r in 0 1; do
  p=$([ $r -eq 0 ] && echo $p0 || echo $p1)
  rc=0; wait "$p" || rc=$?
  [ -n "${HD_VERBOSE:-}" ] && cat "$out/$r"
  # The rank's own last error, not libfabric's teardown warnings that may follow it.
  last="$(grep '^runtime-bench' "$out/$r" | tail -n 1 || true)"
  [ -n "$last" ] || last="$(tail -n 1 "$out/$r")"
  echo "rank $r: exit $rc, $(echo "$(date +%s.%N) - $t_cut" | bc) s after the cut (or earlier): $last"
done
