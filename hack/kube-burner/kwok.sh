#!/usr/bin/env bash
# Proves the kube-burner job runs (make bench-kube-burner-kwok): a kwok fake
# cluster (real kube-apiserver, etcd, controller-manager and scheduler as
# local processes; kwok fakes the nodes and their pods), 3 fake nodes, then
# flowlens-node-density-heavy.yml with KWOK=1 and a few iterations; passes
# when every pod is Running on a fake node and the local indexer's
# jobSummary says passed. No Prometheus here, so the metrics profile is not
# exercised (docs/benchmarks.md says how to run it on a real cluster).
#
# Usage: kwok.sh KUBE_BURNER K8S_BIN_DIR KWOK_BIN_DIR
set -euo pipefail
cd "$(dirname "$0")"
kube_burner=$1 k8s=$2 kwok=$3
iterations=${ITERATIONS:-3}

work=$(mktemp -d /tmp/flowlens-kube-burner.XXXXXX)
cluster=flowlens-kb-$$
kwokctl() { HOME=$work "$kwok/kwokctl" "$@" --name "$cluster"; }
cleanup() {
	if [ -d "$work/.kwok/clusters/$cluster" ]; then
		kwokctl delete cluster >/dev/null 2>&1 || echo "warning: could not delete kwok cluster $cluster" >&2
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "== kwok cluster ($cluster) =="
kwokctl create cluster --runtime binary \
	--kube-apiserver-binary "$k8s/kube-apiserver" \
	--kube-controller-manager-binary "$k8s/kube-controller-manager" \
	--kube-scheduler-binary "$k8s/kube-scheduler" \
	--etcd-binary "$k8s/etcd" \
	--kwok-controller-binary "$kwok/kwok" \
	--kubeconfig "$work/kubeconfig" --wait 2m
kwokctl scale node --replicas 3

echo "== $(basename "$kube_burner") =="
export KWOK=1 ITERATIONS=$iterations METRICS_DIR=$work/collected-metrics
uuid=$(cat /proc/sys/kernel/random/uuid)
(cd "$work" && cp -r "$OLDPWD"/flowlens-node-density-heavy.yml "$OLDPWD"/metrics-profile.yml "$OLDPWD"/templates . &&
	timeout 10m "$kube_burner" init -c flowlens-node-density-heavy.yml --uuid "$uuid" \
		--kubeconfig "$work/kubeconfig" --log-level info)

summary=$(ls "$METRICS_DIR"/jobSummary*.json 2>/dev/null | head -1 || true)
if [ -z "$summary" ]; then
	echo "FAIL: no jobSummary in $METRICS_DIR" >&2
	ls -la "$METRICS_DIR" >&2 || true
	exit 1
fi
echo "== $(basename "$summary") =="
cat "$summary"
if ! grep -q '"passed": *true' "$summary"; then
	echo "FAIL: the job did not pass" >&2
	exit 1
fi
# Every pod of the job reached Ready (the podLatency measurement records
# each pod's conditions): SERVER_REPLICAS + CLIENT_REPLICAS per iteration.
want=$(( iterations * (${SERVER_REPLICAS:-2} + ${CLIENT_REPLICAS:-2}) ))
pods=$(ls "$METRICS_DIR"/podLatencyMeasurement-*.json 2>/dev/null | head -1 || true)
ready=0 nodes=0
if [ -n "$pods" ]; then
	ready=$( (grep -o '"podReadyLatency": *[0-9]*' "$pods" || true) | wc -l)
	nodes=$( (grep -o '"nodeName": *"[^"]\+"' "$pods" || true) | sort -u | wc -l)
fi
echo "podLatency: $ready of $want pods Ready, on $nodes fake nodes"
if [ "$ready" -ne "$want" ]; then
	echo "FAIL: not every pod became Ready" >&2
	exit 1
fi
echo "PASS: kube-burner job completed on the kwok cluster, jobSummary passed"
