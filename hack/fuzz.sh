#!/usr/bin/env bash
# Runs every Go fuzz target (func Fuzz*) of the module for FUZZTIME each
# (`make fuzz`, .ci/run). The targets are found, not listed (`go test -list
# '^Fuzz'`), so a new target runs without touching this.
# Their seed corpora (f.Add, testdata/fuzz) already run in `make test`; this
# mutates them. A failure leaves its input in the package's testdata/fuzz/
# (commit it with the fix: it becomes a seed) and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}

# "pkg FuzzName" lines. go test -list prints a package's names, then its
# "ok <pkg>" line; it runs TestMain (envtest's API server in some
# packages), so it is asked about the packages whose tests declare a Fuzz
# function only. test/otlp is a module of its own, without targets.
dirs=$(grep -rlE --include='*_test.go' --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]*\(' . |
	grep -v '^\./test/otlp/' | xargs -r -n1 dirname | sort -u)
targets=""
if [ -n "$dirs" ]; then
	# shellcheck disable=SC2086 # one argument per directory
	targets=$($GO test -list '^Fuzz' $dirs | awk '
		/^Fuzz/ { names[n++] = $1; next }
		/^ok/   { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }')
fi
if [ -z "$targets" ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi
echo "fuzz targets ($(echo "$targets" | wc -l)), $FUZZTIME each:"
echo "$targets" | sed 's/^/  /'
# fuzz_one runs a target; its output is kept in $out.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fuzz_one() {
	$GO test -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" "$1" 2>&1 | tee "$out"
	return "${PIPESTATUS[0]}"
}
# inputs counts the failing inputs a target has written so far.
inputs() { { find "$1" -type f 2>/dev/null || true; } | wc -l; }
failed=()
while read -r pkg name; do
	echo "== $pkg $name"
	dir=$($GO list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$name
	before=$(inputs "$dir")
	if fuzz_one "$pkg" "$name"; then
		continue
	fi
	# Go's fuzz coordinator (before Go 1.27) can fail a target at the end
	# of -fuzztime with "context deadline exceeded" and no input: a race
	# between the deadline and its workers' context (go.dev/issue/75804).
	# That failure, with no new input written, runs the target once more;
	# any other failure, or the same twice, fails.
	if [ "$(inputs "$dir")" -eq "$before" ] && tail -n 6 "$out" | grep -q '^    context deadline exceeded$'; then
		echo "== $pkg $name: context deadline exceeded with no failing input (go.dev/issue/75804): once more"
		if fuzz_one "$pkg" "$name"; then
			continue
		fi
	fi
	failed+=("$pkg $name")
done <<<"$targets"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz targets that failed (inputs in their package's testdata/fuzz/):" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz ok: every target ran $FUZZTIME without a failure"
