// Package dashboardslab proves flowlens' Grafana dashboards panel by panel
// (its tests are the package): a real Prometheus (Debian's prometheus
// package) on 127.0.0.1 scrapes a real agent (internal/agent, every feature) and
// a real flowlens-collector (built from cmd/flowlens-collector) while a
// network-namespace lab carries UDP and TCP traffic between three
// "workloads", with nftables drop rules, random loss and a rate-limited
// link; then every PromQL expression of every panel of every committed
// dashboard (manifests/dashboards/*.json) runs against Prometheus's HTTP
// API with the dashboard's variables substituted, and a panel whose query
// returns no data fails the test by its title. The same Prometheus also
// answers the kube-burner metrics profile (hack/kube-burner), every query
// but the cAdvisor ones (no kubelet here), so its metric names and PromQL
// are proven too.
//
// The same Prometheus proves the metrics secure default
// (scrapeidentity_test.go): the operator's certificate code issues the
// metrics serving certificate and the scrape identity against a real
// kube-apiserver (envtest), a real agent and collector serve /metrics with
// the operator's default web configuration, and a job with the scrape
// identity reads them while a job without it gets 403.
//
// Needs root and /usr/bin/prometheus (`make deps-prometheus`); without the
// binary the test skips, except in CI (CI set), where it fails. With
// FLOWLENS_DASHBOARDS_RESULTS=file.json it runs the lab longer and writes
// every panel's query results there for hack/dashboards/render.py (`make
// dashboards-render`).
package dashboardslab
