#!/usr/bin/env bash
# Set up soft-RoCE (the rdma_rxe kernel driver) on a laptop or a test VM, so that Titus can
# run over libfabric's verbs;ofi_rxm provider without RDMA hardware.
#
#   sudo deploy/soft-roce.sh [NETDEV]      # NETDEV: the Ethernet interface (default: the
#                                          # one holding the default route)
#   sudo deploy/soft-roce.sh --remove [NETDEV]
#
# Needs root, a kernel with rdma_rxe (most distribution kernels), and the packages
# rdma-core, ibverbs-utils, libibverbs1 and libfabric (Debian/Ubuntu names). Containers
# and VMs without kernel modules cannot load it: use the tcp;ofi_rxm provider there.
set -euo pipefail

die() { echo "soft-roce: $*" >&2; exit 1; }

remove=0
if [ "${1:-}" = "--remove" ]; then remove=1; shift; fi
netdev="${1:-$(ip route show default 2>/dev/null | awk '/default/ {print $5; exit}')}"
[ -n "$netdev" ] || die "no network interface given and no default route to guess one from"
ip link show "$netdev" >/dev/null 2>&1 || die "no interface '$netdev' (see: ip link)"
link="rxe_${netdev}"

[ "$(id -u)" -eq 0 ] || die "run as root (it loads a kernel module and adds an RDMA link)"
command -v rdma >/dev/null || die "the 'rdma' tool is missing: apt-get install iproute2 rdma-core"

if [ "$remove" -eq 1 ]; then
  rdma link delete "$link" 2>/dev/null || true
  echo "soft-roce: removed $link"
  exit 0
fi

modprobe rdma_rxe 2>/dev/null || die "cannot load rdma_rxe: this kernel lacks it, or this is a container (use tcp;ofi_rxm)"
if ! rdma link show "$link/1" >/dev/null 2>&1; then
  rdma link add "$link" type rxe netdev "$netdev" || die "rdma link add $link type rxe netdev $netdev failed"
fi

# Checks: the device exists, has an active port, and libfabric's verbs provider sees it.
rdma link show "$link/1" | grep -q 'state ACTIVE' || die "$link is not ACTIVE (is $netdev up?)"
if command -v ibv_devices >/dev/null; then
  ibv_devices | grep -q "$link" || die "ibv_devices does not list $link (install libibverbs1 and rdma-core)"
fi
if command -v fi_info >/dev/null; then
  fi_info -p "verbs;ofi_rxm" -t FI_EP_RDM >/dev/null 2>&1 \
    || die "libfabric's verbs;ofi_rxm provider does not see $link (install libfabric with verbs support)"
fi

cat <<MSG
soft-roce: $link is up on $netdev.
Run Titus over it with:
  export TITUS_PROVIDER="verbs;ofi_rxm"
  export FI_VERBS_IFACE=$netdev        # the interface verbs should use
  export FI_OFI_RXM_USE_SRX=1          # shared receive context: fewer buffers per peer
  titus launch -n 2 -- titus fabric-bench
Remove it with: sudo $0 --remove $netdev
MSG
