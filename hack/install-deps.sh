#!/usr/bin/env bash
# Installs what a build or test step needs, with apt, only when missing.
#   hack/install-deps.sh bpf    clang, llvm, libbpf headers (make generate)
#   hack/install-deps.sh test   iproute2, nftables, iptables, openssl, dnsmasq, tshark, chromium, promtool (make test)
#   hack/install-deps.sh ui     nodejs, npm (make ui)
#   hack/install-deps.sh kubelet containerd, runc, CNI plugins, iptables, ethtool, dnsmasq (make e2e-kubelet)
#   hack/install-deps.sh bench-kubelet  busybox-static (make bench-kubelet's client image)
set -euo pipefail

need=()
case "${1:-}" in
bpf)
	command -v clang >/dev/null || need+=(clang)
	command -v llvm-strip >/dev/null || need+=(llvm)
	[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
	[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
	;;
test)
	command -v ip >/dev/null || need+=(iproute2)
	command -v nft >/dev/null || need+=(nftables)
	command -v iptables >/dev/null || need+=(iptables)
	command -v openssl >/dev/null || need+=(openssl)            # the tls feature's test
	command -v dnsmasq >/dev/null || need+=(dnsmasq-base)       # the dns feature's test
	command -v tshark >/dev/null || need+=(tshark)              # the IPFIX exporter's Wireshark test, flowlens capture's pcapng
	command -v chromium >/dev/null || need+=(chromium)          # the service map's browser test
	# promtool test rules (test/install's alerts): Debian's prometheus package,
	# installed by its own script, which keeps the package's service from starting.
	[ -x /usr/bin/promtool ] || "$(dirname "$0")/dashboards/install-deps.sh" prometheus
	;;
ui)
	command -v node >/dev/null || need+=(nodejs)
	command -v npm >/dev/null || need+=(npm)
	;;
kubelet)
	command -v containerd >/dev/null || need+=(containerd)
	command -v runc >/dev/null || need+=(runc)
	[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
	command -v iptables >/dev/null || need+=(iptables)
	command -v mount >/dev/null || need+=(mount)
	command -v ethtool >/dev/null || need+=(ethtool)
	command -v dnsmasq >/dev/null || need+=(dnsmasq-base)  # the node's cluster DNS (dns_test.go)
	;;
bench-kubelet)
	[ -x /usr/bin/busybox ] || need+=(busybox-static)
	;;
*)
	echo "usage: $0 bpf|test|ui|kubelet|bench-kubelet" >&2
	exit 2
	;;
esac
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing: ${need[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "need root to apt-get install ${need[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
