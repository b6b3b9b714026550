# flowlens build. `make help` lists the targets.
GO      ?= go
BIN     ?= bin
GOFLAGS ?=
export CGO_ENABLED ?= 0
# gRPC without golang.org/x/net/trace, whose init registers an html/template
# page: a reachable template execution makes the linker keep every exported
# method of every type in an interface (the agent ~4 MB larger, ~2 MiB more
# resident: docs/benchmarks.md, "the agent's memory, third round"). Every go
# command of make gets it, as the Containerfile's build does; `make
# check-layers` checks that the agent and the collector are free of it.
export GOFLAGS += -tags=grpcnotrace

.PHONY: help all build run test test-short check-layers generate generate-groups check-generated deps-bpf deps-test vet clean

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

all: build

# The version every binary prints with --version (internal/shared/version), and the
# commit its *_build_info metric reports.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  ?= -X github.com/flowlens/flowlens/internal/shared/version.Version=$(VERSION) -X github.com/flowlens/flowlens/internal/shared/version.Revision=$(REVISION)
CMDS    := flowlens-agent flowlens-collector flowlens-operator flowlens

build: ## build bin/flowlens-{agent,collector,operator} and bin/flowlens (no clang needed: uses the committed BPF objects)
	@for c in $(CMDS); do echo "go build -o $(BIN)/$$c ./cmd/$$c"; \
	  $(GO) build $(GOFLAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/$$c ./cmd/$$c || exit 1; done

run: build ## run the agent on this machine's interfaces, JSON flows on stdout (root)
	$(BIN)/flowlens-agent $(ARGS)

deps-bpf: ## install clang, llvm and libbpf headers with apt when missing
	@hack/install-deps.sh bpf

deps-test: ## install the tools the tests drive (iproute2, nftables, iptables, chromium, ...)
	@hack/install-deps.sh test

generate: deps-bpf ## regenerate BPF objects and Go bindings (bpf2go)
	$(GO) generate ./internal/agent/datapath/... ./internal/agent/capture/...

generate: generate-groups
generate-groups: generate-grpc ## write the record model's lists of feature groups and the collector's feature metrics calls from the feature registry (groupgen)
	$(GO) run ./internal/agent/feature/registry/groupgen

check-generated: generate ## fail if regenerating changes any committed file
	@git diff --exit-code --stat -- pkg/ internal/ api/ config/ manifests/ charts/ hack/bench/ || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }

vet: ## go vet, gofmt on every committed Go file, and go.mod tidy (both modules)
	$(GO) vet ./...
	$(GO) -C test/otlp vet ./...
	@$(GO) mod tidy -diff && $(GO) -C test/otlp mod tidy -diff || { echo "go.mod is not tidy: run 'go mod tidy' (and 'go -C test/otlp mod tidy')"; exit 1; }
	@unformatted=$$(git ls-files '*.go' | xargs gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "not gofmt-formatted (run gofmt -w):"; echo "$$unformatted"; exit 1; fi

# test/otlp is a module of its own (the OpenTelemetry Collector's receiver
# and its dependencies stay out of the agent's go.mod): run it too.
test: deps-test ## run every test (needs root: real namespaces, veths, BPF)
	$(GO) test -count=1 -timeout 30m ./...
	$(GO) -C test/otlp test -count=1 -timeout 10m ./...

test-short: ## the tests that need no root, no kernel features and no cluster binaries (any machine, any user)
	FLOWLENS_TEST_SHORT=1 $(GO) test -short -count=1 ./...
	FLOWLENS_TEST_SHORT=1 $(GO) -C test/otlp test -short -count=1 ./...

check-layers: ## the layering rules of docs/architecture.md: the collector links nothing of the agent or the kernel; flowlens nothing of the collector; the operator no kernel side and no exporter; shared nothing of the programs; pkg/ nothing internal; cross-builds
	@bad=$$($(GO) list -deps ./cmd/flowlens-collector ./cmd/flowlens | grep -E 'cilium/ebpf|vishvananda|/internal/(agent|operator)(/|$$)' || true); \
	if [ -n "$$bad" ]; then echo "the collector or flowlens links the agent, the operator or the kernel side:"; echo "$$bad"; exit 1; fi
	@bad=$$($(GO) list -deps ./cmd/flowlens | grep -E '/internal/collector(/|$$)' || true); \
	if [ -n "$$bad" ]; then echo "flowlens links the collector (observe needs only internal/shared: enriched, flowquery, textfmt):"; echo "$$bad"; exit 1; fi
	@# A feature's kernel-free options package (internal/agent/feature/<name>/<name>opt:
	@# rows, defaults, validation) is the one part of a feature the operator may link;
	@# what it imports is listed by -deps too, so a kernel import there still fails.
	@bad=$$($(GO) list -deps ./cmd/flowlens-operator | grep -vE '/internal/agent/feature/([a-z0-9]+)/\1opt$$' | grep -E 'cilium/ebpf|vishvananda|/internal/agent/(datapath|evictor|ifaces|metrics|feature|exporter)(/|$$)' || true); \
	if [ -n "$$bad" ]; then echo "the operator links the kernel side or an exporter:"; echo "$$bad"; exit 1; fi
	@bad=$$($(GO) list -deps ./cmd/flowlens-operator | grep -E '/internal/collector(/|$$)' | grep -vE '/internal/collector/collectoropt$$' || true); \
	if [ -n "$$bad" ]; then echo "the operator links the collector (it may link collectoropt, the defaults it writes, only):"; echo "$$bad"; exit 1; fi
	@bad=$$($(GO) list -deps ./internal/shared/... | grep -E '/internal/(agent|collector|operator)(/|$$)' || true); \
	if [ -n "$$bad" ]; then echo "internal/shared links a program's packages (shared is below the agent, the collector and the operator):"; echo "$$bad"; exit 1; fi
	@bad=$$($(GO) list -deps ./pkg/... | grep -E 'cilium/ebpf|vishvananda|flowlens/flowlens/internal/' || true); \
	if [ -n "$$bad" ]; then echo "pkg/ links internal packages or the kernel side:"; echo "$$bad"; exit 1; fi
	@bad=$$($(GO) list -deps ./cmd/flowlens-agent ./cmd/flowlens-collector | grep -E '^(golang.org/x/net/trace|html/template)$$' || true); \
	if [ -n "$$bad" ]; then echo "the agent or the collector links x/net/trace or html/template (GOFLAGS without -tags=grpcnotrace? go.mod's replace of go-conntrack gone?):"; echo "$$bad"; exit 1; fi
	GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/flowlens-collector
	GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/flowlens
	GOOS=linux GOARCH=arm64 $(GO) build ./...
	@echo "layers ok: collector, flowlens and pkg/ free of the kernel side; flowlens free of the collector, shared of the programs; agent and collector free of x/net/trace; the operator free of the kernel side and of the exporters; darwin/arm64 collector and flowlens, linux/arm64 builds pass"

clean:
	rm -rf $(BIN)

-include hack/make/*.mk
