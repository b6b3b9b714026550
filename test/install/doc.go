// Package install proves the cluster install that sits beside the operator's
// manifests (its tests are the package):
//
//   - the alerts: manifests/flowlens-alerts.rules.yaml under Prometheus' own
//     rule tester (promtool test rules, Debian's prometheus package) with
//     series that fire and series that do not fire every alert; the
//     PrometheusRule manifests/flowlens-alerts.yaml holding the same rules;
//     every alert's runbook in docs/alerts.md;
//   - the ServiceMonitors: each selects a Service that exists (the agents'
//     is the one the operator renders) by its labels and names a port it
//     has; they and the PrometheusRule are valid objects for the Prometheus
//     Operator's own CRDs, installed in a real kube-apiserver (envtest);
//   - the Helm chart charts/flowlens: `helm template` with the default values
//     renders the objects of manifests/ (compared object by object), the
//     monitoring values render manifests/' ServiceMonitors and
//     PrometheusRule, the unbound ClusterRole flowlens-capture is there
//     whatever the values, and `helm lint --strict` is clean; helm install (into
//     a namespace it creates), upgrade and uninstall work against a real
//     kube-apiserver (envtest), which stores and validates what they apply.
//
// helm is built by `make helm` (hack/tools-helm) into the flowlens cache,
// promtool comes with `make deps-prometheus`, the Prometheus Operator's
// CRDs with `make monitoring-crds` (a Go module, hack/monitoring-crds). A
// test whose tool is missing skips outside CI and fails in CI
// (internal/testkit); all skip in short mode.
package install
