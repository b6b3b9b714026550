# The collector's service map page (docs/ui.md). Included by the top-level
# Makefile, which defines GO; check-generated runs check-ui (so CI's first
# step fails when internal/collector/ui/dist is not what the sources and the
# lockfile build) and deps-test installs the browser the page's test drives.
#
#   make ui             internal/collector/ui/dist from internal/collector/ui/web (npm ci from the lockfile, esbuild)
#   make ui-screenshot  docs/img/ui-service-map.png from the browser test's session (root)
#
# node_modules is cached under ~/.cache/flowlens/ui/<lockfile hash>
# (hack/ui/build.sh); Debian's nodejs/npm and chromium are installed with apt
# when missing (hack/install-deps.sh ui, test).

GO ?= go

.PHONY: ui check-ui deps-ui ui-screenshot

check-generated: check-ui

deps-ui: ## install node and npm with apt when missing (make ui)
	@hack/install-deps.sh ui

ui: deps-ui ## rebuild the service map page (internal/collector/ui/dist) from its sources and package-lock.json
	@hack/ui/build.sh

check-ui: ui ## fail if the embedded page (internal/collector/ui/dist) is not what make ui builds
	@changed=$$(git status --porcelain -- internal/collector/ui/dist internal/collector/ui/web); \
	if [ -n "$$changed" ]; then echo "$$changed"; echo "the embedded service map page is stale: run 'make ui' and commit"; exit 1; fi

ui-screenshot: deps-test ## docs/img/ui-service-map.png: the page in headless Chromium, an edge's flows open (root)
	FLOWLENS_UI_SCREENSHOT=$(abspath docs/img/ui-service-map.png) $(GO) test -count=1 -run 'TestServiceMapInBrowser$$' ./internal/collector/
