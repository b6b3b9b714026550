// Module that pins the Prometheus Operator release whose CRDs
// (monitoring.coreos.com: ServiceMonitor, PrometheusRule, in the module's
// example/prometheus-operator-crd/) test/install installs into envtest to
// validate manifests/flowlens-servicemonitors.yaml, manifests/flowlens-alerts.yaml
// and the chart's. Nothing is built from it: the test finds the files with
//
//	go -C hack/monitoring-crds mod download -json github.com/prometheus-operator/prometheus-operator
//
// Not tidied (it imports nothing, and tidy would drop the requirement).
module github.com/flowlens/flowlens/hack/monitoring-crds

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
