# Grafana dashboards (docs/dashboards.md). Included by the top-level Makefile,
# which defines GO and BIN and makes `generate` depend on generate-dashboards
# (so check-generated diffs manifests/dashboards/) and `test` on
# deps-prometheus (so CI has the Prometheus the panel-query test drives).
#
#   make generate-dashboards  manifests/dashboards/*.json and the sidecar ConfigMap, from internal/operator/dashboards
#   make test-dashboards      every panel's queries against a real Prometheus, agent and collector (root, ~40 s)
#   make dashboards-render    the same lab run, then docs/img/dashboards/*.png (python3-matplotlib)
#
# Prometheus and matplotlib are Debian's packages, installed with apt when
# missing by hack/dashboards/install-deps.sh (installing starts no service).

GO  ?= go
BIN ?= bin

# Where the lab run leaves its query results for the renderer (outside the
# work tree).
DASHBOARDS_OUT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/flowlens/dashboards

.PHONY: generate-dashboards deps-prometheus deps-render test-dashboards dashboards-render

generate: generate-dashboards
test: deps-prometheus

generate-dashboards: ## write manifests/dashboards/ (Grafana JSON + sidecar ConfigMap) from internal/operator/dashboards
	$(GO) run ./hack/dashboards -out manifests/dashboards

deps-prometheus: ## install Debian's prometheus with apt when missing (the panel-query test)
	@hack/dashboards/install-deps.sh prometheus

deps-render: ## install python3-matplotlib with apt when missing (dashboards-render)
	@hack/dashboards/install-deps.sh render

test-dashboards: deps-prometheus deps-test ## prove every dashboard panel returns data from a real Prometheus (root)
	$(GO) test -count=1 ./internal/operator/dashboards/
	$(GO) test -count=1 -v -run 'TestPanels' ./test/dashboards/

dashboards-render: deps-prometheus deps-test deps-render ## lab run, then docs/img/dashboards/*.png from its query results (root)
	@mkdir -p $(DASHBOARDS_OUT)
	FLOWLENS_DASHBOARDS_RESULTS=$(abspath $(DASHBOARDS_OUT))/results.json \
		$(GO) test -count=1 -run 'TestPanels' ./test/dashboards/
	/usr/bin/python3 hack/dashboards/render.py $(abspath $(DASHBOARDS_OUT))/results.json docs/img/dashboards
