# The chaos suite (test/chaos, build tag chaos): real traffic through the
# real binaries while something breaks; every packet delivered or counted
# as lost. Included by the top-level Makefile, which defines GO.

.PHONY: chaos
chaos: deps-test ## floods and faults against the real binaries (test/chaos; root, ~10 min)
	$(GO) test -count=1 -tags chaos -timeout 40m -v ./test/chaos
