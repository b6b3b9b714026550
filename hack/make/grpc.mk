# gRPC flow export API: regenerates api/flow/v1 (flow, history and capture .pb.go)
# from api/flow/v1/flow.proto. Included by the top-level Makefile, which
# defines GO and BIN and makes `generate` depend on generate-grpc.
#
# protoc comes from Debian (protobuf-compiler + libprotobuf-dev for the
# well-known types), installed with apt by hack/protoc/install.sh when
# missing. The Go plugins are built with `go install module@version` at the
# exact versions pinned below (never @latest) into a local bin directory
# outside the work tree, $(FLOWLENS_CACHE)/protoc-plugins/ (as operator.mk
# caches its tools), one directory per version: only a new machine or a
# version bump pays for a build, and no binary lands in the repository.
# The generated files record these versions in their header: bumping one
# means regenerating and committing.

GO  ?= go
BIN ?= bin

FLOWLENS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/flowlens

PROTOC_GEN_GO_VERSION      := v1.36.11
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
# The protoc Debian bookworm ships; the generated headers name it.
PROTOC_VERSION             := 3.21.12

PROTOC_PLUGINS     = $(abspath $(FLOWLENS_CACHE))/protoc-plugins
PROTOC_GEN_GO      = $(PROTOC_PLUGINS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC = $(PROTOC_PLUGINS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)/protoc-gen-go-grpc

FLOW_PROTO = api/flow/v1/flow.proto api/flow/v1/history.proto api/flow/v1/capture.proto

.PHONY: generate-grpc deps-protoc protoc-plugins

generate: generate-grpc

deps-protoc: ## install protoc and the well-known .proto files with apt when missing
	@hack/protoc/install.sh

protoc-plugins: $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) ## build protoc-gen-go and protoc-gen-go-grpc (pinned)

$(PROTOC_GEN_GO):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) CGO_ENABLED=0 $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(PROTOC_GEN_GO_GRPC):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) CGO_ENABLED=0 $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

generate-grpc: deps-protoc $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) ## regenerate the gRPC flow API Go code (protoc)
	@protoc --version | grep -qF ' $(PROTOC_VERSION)' || \
		echo "warning: protoc is not $(PROTOC_VERSION) ($$(protoc --version)): the generated headers will differ" >&2
	protoc -I . -I /usr/include \
		--plugin=protoc-gen-go=$(PROTOC_GEN_GO) \
		--plugin=protoc-gen-go-grpc=$(PROTOC_GEN_GO_GRPC) \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		$(FLOW_PROTO)
