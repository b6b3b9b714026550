#!/usr/bin/env bash
# make ui: builds the collector's service map page (internal/collector/ui/web)
# into internal/collector/ui/dist, which the collector binary embeds.
#
# node_modules comes from the lockfile alone (npm ci, no install scripts) and
# is kept under ~/.cache/flowlens/ui/<lockfile hash>, outside the work tree;
# esbuild (from that lockfile) bundles src/app.js with Cytoscape.js into one
# file. The same lockfile and sources give the same bytes: check-generated
# (check-ui) rebuilds and diffs them.
set -euo pipefail
cd "$(dirname "$0")/../.."
web=internal/collector/ui/web
dist=internal/collector/ui/dist

command -v npm >/dev/null || { echo "make ui needs node and npm (apt-get install nodejs npm)" >&2; exit 1; }
hash=$(cat "$web/package.json" "$web/package-lock.json" | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/flowlens/ui/$hash
if [ ! -x "$cache/node_modules/.bin/esbuild" ]; then
	rm -rf "$cache.tmp"
	mkdir -p "$cache.tmp"
	cp "$web/package.json" "$web/package-lock.json" "$cache.tmp/"
	npm ci --prefix "$cache.tmp" --ignore-scripts --no-audit --no-fund --loglevel=error \
		--cache "${XDG_CACHE_HOME:-$HOME/.cache}/flowlens/npm"
	rm -rf "$cache"
	mv "$cache.tmp" "$cache"
fi

rm -rf "$dist"
mkdir -p "$dist"
# NODE_PATH: esbuild resolves "cytoscape" from the cached node_modules.
NODE_PATH="$cache/node_modules" "$cache/node_modules/.bin/esbuild" "$web/src/app.js" \
	--bundle --minify --format=iife --target=es2020 --charset=utf8 --legal-comments=eof \
	--log-level=warning --outfile="$dist/app.js"
cp "$web/src/index.html" "$web/src/style.css" "$dist/"
# The licence of what the bundle carries, next to it.
cp "$cache/node_modules/cytoscape/LICENSE" "$dist/LICENSE.cytoscape.txt"
echo "ui: $(du -b "$dist/app.js" | cut -f1) bytes of app.js in $dist"
