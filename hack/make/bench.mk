# Benchmarks (docs/benchmarks.md). Included by the top-level Makefile, which
# defines GO and BIN. Every target here needs root (BPF, network namespaces).
# None of them runs in `make test`; only check-budget (also part of
# `make test`, as internal/agent/datapath's TestBudget) is deterministic enough for CI.
#
#   make bench-bpf      kernel datapath through BPF_PROG_TEST_RUN (~3 min)
#   make bench          Go micro-benchmarks, -count 6, benchstat (~10 min)
#   make bench-enrich   enrichment hooks' ns per run on real traffic (~1 min)
#   make bench-live     netns lab, hey + iperf3, baseline vs agent (~10 min)
#   make bench-live PEER=1  flowlens beside NetObserv's agent, bridge lab, 4 workloads, fixed and saturating (~18 min)
#   make bench-mem      the agent's RSS by origin, light loads, A/B (~5 min)
#   make bench-collector  flowlens-collector beside NetObserv's flowlogs-pipeline, same flows (~6 min)
#   make bench-plots    docs/img/*.png from the latest results
#   make check-budget   instruction/size/allocation budget (bpf/budget.json)
#   make budget-update  rewrite bpf/budget.json from this machine (a reviewed change)

GO  ?= go
BIN ?= bin

# NetObserv's object for this architecture (hack/bench/peer pins the version).
BENCH_PEER_ARCH ?= $(subst amd64,x86,$(shell $(GO) env GOARCH))

# Results land here, outside the work tree; bench-plots reads them.
BENCH_OUT   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/flowlens/bench
BENCH_COUNT ?= 6
BENCH_TIME  ?= 1s
# A file of earlier `make bench` output to compare with (benchstat old new).
BENCH_BASE  ?=
BENCH_PKGS  ?= ./internal/agent/datapath/batchread ./internal/agent/evictor ./internal/agent/exporter/grpc ./internal/agent/exporter/ipfix ./internal/agent/exporter/stdout ./internal/agent/exporter/otlp
# Extra flags for the kernel benchmark, e.g. BENCH_BPF_ARGS='-reps 11 -flows 1k,100k'.
BENCH_BPF_ARGS ?=

# benchstat, pinned (golang.org/x/perf has no tags: a pseudo-version).
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da
BENCHSTAT          = $(abspath $(BIN))/tools/benchstat-$(BENCHSTAT_VERSION)/benchstat

.PHONY: bench-bpf bench bench-enrich bench-startup bench-live bench-mem bench-collector bench-plots check-budget budget-update benchstat generate-bench

# The benchmark's own BPF objects (driver, map choice, lock-free experiment)
# are committed like internal/agent/datapath's; `make generate` rebuilds them too.
generate: generate-bench
generate-bench: deps-bpf
	$(GO) generate ./hack/bench/bpf/...

$(BENCHSTAT):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) CGO_ENABLED=0 $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

benchstat: $(BENCHSTAT) ## build benchstat (pinned) into bin/tools

bench-bpf: ## kernel datapath ns/packet via BPF_PROG_TEST_RUN, no-op floor in the same run (root)
	@mkdir -p $(BENCH_OUT)
	$(GO) build -o $(BENCH_OUT)/bench-bpf ./hack/bench/bpf
	peer=$$($(GO) -C hack/bench/peer mod download -json github.com/netobserv/netobserv-ebpf-agent | sed -n 's/.*"Dir": "\(.*\)",/\1/p') && \
	$(BENCH_OUT)/bench-bpf -peer $$peer/pkg/ebpf/bpf_$(BENCH_PEER_ARCH)_bpfel.o -json $(BENCH_OUT)/bpf.json $(BENCH_BPF_ARGS) | tee $(BENCH_OUT)/bpf.txt

bench: $(BENCHSTAT) ## Go micro-benchmarks (eviction, merge, JSON, protobuf, gRPC, the exporters at 100k flows per eviction), -count 6, benchstat (root)
	@mkdir -p $(BENCH_OUT)
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) -timeout 60m $(BENCH_PKGS) | tee $(BENCH_OUT)/go.txt
	@echo; echo "== summary (benchstat) =="
	$(BENCHSTAT) $(BENCH_OUT)/go.txt | tee $(BENCH_OUT)/benchstat.txt
	@echo; echo "== eviction: batch reader vs per-key readers (benchstat -col /reader) =="
	$(BENCHSTAT) -filter '.name:EvictMap' -col /reader $(BENCH_OUT)/go.txt | tee $(BENCH_OUT)/benchstat-readers.txt
	@echo; echo "== eviction with the enrichment merge (benchstat -col /enrich) =="
	$(BENCHSTAT) -filter '.name:Evict' -col /enrich $(BENCH_OUT)/go.txt | tee $(BENCH_OUT)/benchstat-enrich.txt
	@echo; echo "== exporters at 100k flows per eviction: ns, CPU ns and allocations per flow (benchstat -filter Eviction) =="
	$(BENCHSTAT) -filter '.name:Eviction' $(BENCH_OUT)/go.txt | tee $(BENCH_OUT)/benchstat-exporters.txt
	@if [ -n "$(BENCH_BASE)" ]; then echo; echo "== $(BENCH_BASE) vs this run =="; $(BENCHSTAT) $(BENCH_BASE) $(BENCH_OUT)/go.txt; fi

# Extra flags for the enrichment hooks' benchmark, e.g. BENCH_ENRICH_ARGS='-obj old.o,internal/agent/datapath/datapath_bpfel.o -runs 7'.
BENCH_ENRICH_ARGS ?=

bench-enrich: ## enrichment hooks' ns per run on real TCP (with loss) and UDP drops, bpf_stats (root; iperf3, nft)
	@mkdir -p $(BENCH_OUT)
	@command -v iperf3 >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends iperf3 >/dev/null; }
	$(GO) run ./hack/bench/enrich $(BENCH_ENRICH_ARGS) | tee $(BENCH_OUT)/enrich.txt

# Extra flags for the start-up benchmark, e.g. BENCH_STARTUP_ARGS='-agent old/flowlens-agent,bin/flowlens-agent -ifaces 10'.
BENCH_STARTUP_ARGS ?= -agent $(abspath $(BIN))/flowlens-agent

bench-startup: build ## the agent's start: exec to attached, wall and CPU, medians of interleaved runs (root)
	@mkdir -p $(BENCH_OUT)
	$(GO) run ./hack/bench/startup $(BENCH_STARTUP_ARGS) -out $(abspath $(BENCH_OUT))/startup.json | tee $(BENCH_OUT)/startup.txt

# PEER=1: bench-live runs the side-by-side with NetObserv's agent (hack/bench/live.sh says how).
PEER ?=

bench-live: ## live overhead: netns lab, hey at a fixed rate + iperf3, baseline vs agent, A/A beside A/B; PEER=1: beside NetObserv (root)
	@mkdir -p $(BENCH_OUT)
	GO="$(GO)" BIN="$(abspath $(BIN))" OUT="$(abspath $(BENCH_OUT))" PEER="$(PEER)" hack/bench/live.sh

# BENCH_MEM_ARGS: e.g. -agent bin/flowlens-agent,bin/flowlens-agent+GOGC=100 -workloads idle,udp
# (a later -agent replaces the default). BENCH_MEM_JSON: the file in
# $(BENCH_OUT) the runs go to; the new-flow flood goes to mem-flood.json so
# that it does not replace the light loads' (bench-plots draws both):
#   make bench-mem BENCH_MEM_JSON=mem-flood.json BENCH_MEM_ARGS='-workloads udp -udp-flows 0 -drain 10s'
BENCH_MEM_ARGS ?=
BENCH_MEM_JSON ?= mem.json
bench-mem: build ## the agent's RSS by origin (binary text/rodata, anonymous, BPF maps, Go heap) on a small lab with light loads (root)
	@mkdir -p $(BENCH_OUT)
	$(GO) run ./hack/bench/mem -agent $(BIN)/flowlens-agent -collector $(BIN)/flowlens-collector -out $(abspath $(BENCH_OUT))/$(BENCH_MEM_JSON) $(BENCH_MEM_ARGS)

# Extra flags for the collector benchmark, e.g. BENCH_COLLECTOR_ARGS='-runs 7 -rate 20000'.
BENCH_COLLECTOR_ARGS ?=

# flowlogs-pipeline is built from hack/bench/peer (the release its replace
# pins; go.sum verifies NetObserv's modules, GONOSUMDB as its go.mod says).
# The driver runs on core 0, each target pinned to core 1 (-core).
bench-collector: envtest-assets ## flowlens-collector beside NetObserv's flowlogs-pipeline: same flows, envtest enrichment, same metrics; CPU per flow, max flows/s, RSS on one core
	@mkdir -p $(BENCH_OUT)/collector-bin
	$(GO) build -o $(BENCH_OUT)/collector-bin/flowlens-collector ./cmd/flowlens-collector
	$(GO) build -o $(BENCH_OUT)/collector-bin/bench-collector ./hack/bench/collector
	GONOSUMDB=$${GONOSUMDB:-github.com/netobserv,github.com/vmware} $(GO) -C hack/bench/peer build \
		-o $(abspath $(BENCH_OUT))/collector-bin/flowlogs-pipeline github.com/netobserv/flowlogs-pipeline/cmd/flowlogs-pipeline
	taskset -c 0 $(BENCH_OUT)/collector-bin/bench-collector -collector $(BENCH_OUT)/collector-bin/flowlens-collector \
		-flp $(BENCH_OUT)/collector-bin/flowlogs-pipeline -out $(BENCH_OUT) $(BENCH_COLLECTOR_ARGS) 2>&1 | tee $(BENCH_OUT)/collector.txt

bench-plots: ## docs/img/*.png from $(BENCH_OUT)/{bpf.json,go.txt,live.json,live-sidebyside.json,soak.csv,collector.json,mem.json,mem-flood.json,startup.json}
	$(GO) -C hack/bench/plot run . -in $(abspath $(BENCH_OUT)) -out $(abspath docs/img)

check-budget: ## fail if a BPF program's instruction counts/sizes or the eviction's allocations grew past bpf/budget.json (root)
	$(GO) test -count=1 -run '^TestBudget$$' -v ./internal/agent/datapath/

budget-update: ## rewrite bpf/budget.json with this machine's figures (commit it with the reason)
	FLOWLENS_BUDGET_UPDATE=1 $(GO) test -count=1 -run '^TestBudget$$' ./internal/agent/datapath/
	@git diff --stat -- bpf/budget.json

# kube-burner, built from its own tools module (hack/kube-burner/tools: the
# version is its go.mod's; `go install ...@version` cannot be used here).
KUBE_BURNER_VERSION := $(shell awk '$$1 == "github.com/kube-burner/kube-burner" { print $$2; exit }' hack/kube-burner/tools/go.mod)
KUBE_BURNER         := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/flowlens/bin/kube-burner-$(KUBE_BURNER_VERSION)

.PHONY: kube-burner bench-kube-burner-kwok

$(KUBE_BURNER):
	@mkdir -p $(dir $@)
	@echo "building kube-burner $(KUBE_BURNER_VERSION) into $@"
	CGO_ENABLED=0 $(GO) -C hack/kube-burner/tools build -o $@.tmp github.com/kube-burner/kube-burner/cmd/kube-burner
	@mv $@.tmp $@

kube-burner: $(KUBE_BURNER) ## build kube-burner (pinned in hack/kube-burner/tools, cached)

bench-kube-burner-kwok: $(KUBE_BURNER) e2e-assets ## prove hack/kube-burner's job on a kwok fake cluster (jobSummary passed)
	hack/kube-burner/kwok.sh $(KUBE_BURNER) $(ENVTEST_ASSETS_DIR) $(KWOK_DIR)
