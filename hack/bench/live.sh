#!/usr/bin/env bash
# Live overhead benchmark (make bench-live): builds the agent, the collector
# (when the tree has one) and the lab driver (hack/bench/live), installs hey
# and iperf3 with apt when missing, and runs rounds of A (no agent), B
# (agent), A in a three-namespace lab it creates and removes. Needs root.
#
# PEER=1 (make bench-live PEER=1): the side-by-side with NetObserv instead.
# Also builds NetObserv's agent and its gRPC sink from hack/bench/peer (the
# pinned module; the agent binary, ~100 MB, is cached in $OUT/live-bin per
# go.mod/go.sum), installs ethtool, and runs two harnesses, each in a bridge
# lab of its own (both agents on the two host-side veths): fixed (HTTP
# keep-alive at 100 requests/s per hey worker, HTTP new connection per
# request at 20, one iperf3 TCP stream, UDP at 50 000 datagrams/s cycling
# 50 000 flows; offloads off), then saturating (the same four unpaced: hey
# with no rate limit, the UDP sender as fast as it goes; TSO/GSO/GRO on).
# Per workload, ROUNDS rounds of none, flowlens, NetObserv, none. Prints,
# per harness, the BPF ns per bridged packet of both with the ratio, the
# ingress (counting) and egress (listed) hooks apart, exactness, agent CPU
# per exported flow and peak RSS, and client-side ratios beside the A/A
# band; $OUT/live-sidebyside.{txt,json}.
# Driver flags for it (in LIVE_ARGS): -harness fixed,saturating,
# -workloads keepalive,newconn,tcp,udp, -sbs-duration 8s, -sbs-hey-c 50,
# -sbs-hey-q-keepalive 100, -sbs-hey-q-newconn 20, -sbs-udp-flows 50000,
# -sbs-udp-pps 50000 (the fixed harness's rates; 0: unpaced), -offloads
# (fixed harness: keep TSO/GSO/GRO on), -sbs-keep-logs (keep every agent
# run's log; a run whose count is off always keeps it), -flowlens-features none,
# -peer-setarch=false, -cache-active-timeout 5s, -cache-max-flows 100000.
# e.g. make bench-live PEER=1 ROUNDS=1 LIVE_ARGS="-harness saturating -workloads tcp,udp -sbs-duration 4s"
#
# Environment: GO, BIN, OUT (results dir), ROUNDS (default 3), PEER,
# LIVE_ARGS (extra flags for hack/bench/live, e.g. "-hey-q 200 -tcp=false"),
# EXPORTS and SCALE_ROUNDS: the scale run once per export, in SCALE_ROUNDS
# rounds (-scale-exports, -scale-rounds), e.g.
#   make bench-live ROUNDS=0 EXPORTS="grpc kafka-batch kafka-flow" SCALE_ROUNDS=5
# A kafka-* export runs a local Apache Kafka broker (internal/testkit/kafkatest;
# hack/kafka/fetch.sh fetches it once, with Java if missing).
# Bounded: about 70 s per round plus ~30 s of builds and setup; with PEER=1
# about 2.7 min per round and harness (4 workloads, 8 s runs: ~18 min for 3
# rounds of both) plus the
# builds (the first NetObserv build downloads its modules: a few minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."

GO=${GO:-go}
BIN=${BIN:-$PWD/bin}
OUT=${OUT:-${XDG_CACHE_HOME:-$HOME/.cache}/flowlens/bench}
ROUNDS=${ROUNDS:-3}
PEER=${PEER:-}

if [ "$(id -u)" -ne 0 ]; then
	echo "bench-live needs root (network namespaces, BPF)" >&2
	exit 1
fi
need=()
command -v hey >/dev/null || need+=(hey)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ip >/dev/null || need+=(iproute2)
if [ -n "$PEER" ]; then
	command -v ethtool >/dev/null || need+=(ethtool)
fi
if [ ${#need[@]} -gt 0 ]; then
	echo "installing: ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$OUT/live-bin"
"$GO" build -o "$OUT/live-bin/flowlens-agent" ./cmd/flowlens-agent
"$GO" build -o "$OUT/live-bin/live" ./hack/bench/live

# Safety net: remove this run's namespaces even if the driver is killed.
cleanup() {
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^flb-bench-" || true); do
		pid=${ns#flb-bench-}; pid=${pid%%-*}
		if ! kill -0 "$pid" 2>/dev/null; then ip netns del "$ns" 2>/dev/null || true; fi
	done
}
trap cleanup EXIT

if [ -n "$PEER" ]; then
	# NetObserv's agent and sink, from the pinned module. The checksum
	# database has no entry for NetObserv's versions: go.sum verifies them.
	export GONOSUMDB=${GONOSUMDB:-github.com/netobserv,github.com/vmware}
	key=$(cat hack/bench/peer/go.mod hack/bench/peer/go.sum | sha256sum | cut -c1-12)
	peer_agent="$OUT/live-bin/netobserv-ebpf-agent-$key"
	if [ ! -x "$peer_agent" ]; then
		echo "building NetObserv's agent (hack/bench/peer, cached as $peer_agent)"
		rm -f "$OUT"/live-bin/netobserv-ebpf-agent-*
		"$GO" -C hack/bench/peer build -o "$peer_agent.tmp" github.com/netobserv/netobserv-ebpf-agent/cmd
		mv "$peer_agent.tmp" "$peer_agent"
	fi
	"$GO" -C hack/bench/peer build -o "$OUT/live-bin/netobserv-sink" ./sink
	# shellcheck disable=SC2086
	timeout --foreground 90m "$OUT/live-bin/live" -rounds "$ROUNDS" -agent "$OUT/live-bin/flowlens-agent" \
		-peer-agent "$peer_agent" -peer-sink "$OUT/live-bin/netobserv-sink" -out "$OUT" ${LIVE_ARGS:-} | tee "$OUT/live-sidebyside.txt"
	exit "${PIPESTATUS[0]}"
fi

collector=()
# gRPC export when the agent is built with the gRPC exporter and the
# collector exists; otherwise JSON lines to a file (the exact-count check
# needs the exported flows either way).
# (The list is read whole: grep -q would stop reading early, and go list,
# killed by SIGPIPE, would fail the pipeline under pipefail.)
if [ -d cmd/flowlens-collector ] && "$GO" list -deps ./cmd/flowlens-agent | grep -c '/internal/agent/exporter/grpc$' >/dev/null; then
	"$GO" build -o "$OUT/live-bin/flowlens-collector" ./cmd/flowlens-collector
	collector=(-collector "$OUT/live-bin/flowlens-collector")
else
	echo "note: the agent has no gRPC exporter in this tree: exporting JSON lines to a file instead"
fi

scale=()
if [ -n "${EXPORTS:-}" ]; then
	exports=$(echo "$EXPORTS" | tr -s ' ' ',')
	scale+=(-scale-exports "$exports")
	case "$exports" in *kafka*) hack/kafka/fetch.sh >/dev/null ;; esac
fi
scale_rounds=${SCALE_ROUNDS:-1}
scale+=(-scale-rounds "$scale_rounds")

# shellcheck disable=SC2086
timeout --foreground "$((15 + 3 * scale_rounds))m" "$OUT/live-bin/live" -rounds "$ROUNDS" -agent "$OUT/live-bin/flowlens-agent" \
	"${collector[@]}" "${scale[@]}" -out "$OUT" ${LIVE_ARGS:-} | tee "$OUT/live.txt"
