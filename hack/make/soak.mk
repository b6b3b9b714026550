# The soak run (test/soak, build tag soak; docs/benchmarks.md, "Soak"). Not
# in CI: it takes SOAK_DURATION (an hour by default). Included by the
# top-level Makefile, which defines GO; BENCH_OUT comes from bench.mk, so
# `make bench-plots` draws docs/img/soak.png from the run's soak.csv.

SOAK_DURATION ?= 1h
SOAK_INTERVAL ?= 10s
SOAK_OUT      ?= $(BENCH_OUT)

.PHONY: soak
soak: ## an hour of mixed traffic and namespace churn; fails unless RSS, goroutines, fds and BPF objects stay flat (root)
	@mkdir -p $(SOAK_OUT)
	SOAK_DURATION=$(SOAK_DURATION) SOAK_INTERVAL=$(SOAK_INTERVAL) SOAK_OUT=$(abspath $(SOAK_OUT)) \
		$(GO) test -count=1 -tags soak -timeout 0 -run '^(TestFit.*|TestSoak)$$' -v ./test/soak
