#!/usr/bin/env bash
# Live overhead benchmark (make bench-live): builds the agent, the collector
# (when the tree has one) and the lab driver (hack/bench/live), installs hey
# and iperf3 with apt when missing, and runs rounds of A (no agent), B
# (agent), A in a three-namespace lab it creates and removes. Needs root.
#
# Environment: GO, BIN, OUT (results dir), ROUNDS (default 3), LIVE_ARGS
# (extra flags for hack/bench/live, e.g. "-hey-q 200 -tcp=false").
# Bounded: about 70 s per round plus ~30 s of builds and setup.
set -euo pipefail
cd "$(dirname "$0")/../.."

GO=${GO:-go}
BIN=${BIN:-$PWD/bin}
OUT=${OUT:-${XDG_CACHE_HOME:-$HOME/.cache}/flowlens/bench}
ROUNDS=${ROUNDS:-3}

if [ "$(id -u)" -ne 0 ]; then
	echo "bench-live needs root (network namespaces, BPF)" >&2
	exit 1
fi
need=()
command -v hey >/dev/null || need+=(hey)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing: ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$OUT/live-bin"
"$GO" build -o "$OUT/live-bin/flowlens-agent" ./cmd/flowlens-agent
"$GO" build -o "$OUT/live-bin/live" ./hack/bench/live
collector=()
# gRPC export when the agent is built with the gRPC exporter and the
# collector exists; otherwise JSON lines to a file (the exact-count check
# needs the exported flows either way).
if [ -d cmd/flowlens-collector ] && "$GO" list -deps ./cmd/flowlens-agent | grep -q '/internal/exporter/grpc$'; then
	"$GO" build -o "$OUT/live-bin/flowlens-collector" ./cmd/flowlens-collector
	collector=(-collector "$OUT/live-bin/flowlens-collector")
else
	echo "note: the agent has no gRPC exporter in this tree: exporting JSON lines to a file instead"
fi

# Safety net: remove this run's namespaces even if the driver is killed.
cleanup() {
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^flb-bench-" || true); do
		pid=${ns#flb-bench-}; pid=${pid%%-*}
		if ! kill -0 "$pid" 2>/dev/null; then ip netns del "$ns" 2>/dev/null || true; fi
	done
}
trap cleanup EXIT

# shellcheck disable=SC2086
timeout --foreground 15m "$OUT/live-bin/live" -rounds "$ROUNDS" -agent "$OUT/live-bin/flowlens-agent" \
	"${collector[@]}" -out "$OUT" ${LIVE_ARGS:-} | tee "$OUT/live.txt"
