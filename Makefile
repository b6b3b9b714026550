# flowlens build. `make help` lists the targets.
GO      ?= go
BIN     ?= bin
GOFLAGS ?=
export CGO_ENABLED ?= 0

.PHONY: help all build run test test-short generate check-generated deps-bpf deps-test vet clean

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

all: build

build: ## build bin/flowlens-agent (no clang needed: uses the committed BPF objects)
	$(GO) build $(GOFLAGS) -o $(BIN)/flowlens-agent ./cmd/flowlens-agent

run: build ## run the agent on this machine's interfaces, JSON flows on stdout (root)
	$(BIN)/flowlens-agent $(ARGS)

deps-bpf: ## install clang, llvm and libbpf headers with apt when missing
	@hack/install-deps.sh bpf

deps-test: ## install the tools the tests drive (iproute2, nftables, iptables)
	@hack/install-deps.sh test

generate: deps-bpf ## regenerate BPF objects and Go bindings (bpf2go)
	$(GO) generate ./pkg/datapath/...

check-generated: generate ## fail if regenerating changes any committed file
	@git diff --exit-code --stat -- pkg/ api/ config/ manifests/ || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }

vet: ## go vet, and gofmt on every committed Go file
	$(GO) vet ./...
	@unformatted=$$(git ls-files '*.go' | xargs gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "not gofmt-formatted (run gofmt -w):"; echo "$$unformatted"; exit 1; fi

test: deps-test ## run every test (needs root: real namespaces, veths, BPF)
	$(GO) test -count=1 -timeout 30m ./...

clean:
	rm -rf $(BIN)

-include hack/make/*.mk
