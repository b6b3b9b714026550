# Fuzzing (docs/security.md): every decoder of untrusted bytes has a Go fuzz
# target (func Fuzz* beside its tests), whose seeds run in `make test`.
# Included by the top-level Makefile, which defines GO.

FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## run every Go fuzz target (found with go test -list '^Fuzz') for FUZZTIME each (default 10s); a failure's input lands in testdata/fuzz/
	GO=$(GO) FUZZTIME=$(FUZZTIME) hack/fuzz.sh
