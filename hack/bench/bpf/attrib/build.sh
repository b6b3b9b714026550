#!/bin/sh
# build.sh OUT: bench-bpf binaries whose embedded datapath object has one
# property of the default datapath switched off (docs/benchmarks.md §43).
#
# The switches are -D macros (ATTR_NO_*) that switches.patch adds to a copy
# of bpf/flows.h; bpf/ itself is not changed, because any edit there moves
# the committed object's BTF line info (check-generated) even where the
# instructions stay the same. Each variant's object is embedded in place of
# internal/agent/datapath/datapath_bpfel.o by `go build -overlay`: the tree
# is never written.
#
#   base    the patched source without -D: instruction-identical to the
#           committed object (checked below)
#   once    ATTR_NO_ONCE    every hook counts an existing flow (fast() true)
#   prev    ATTR_NO_PREV    no previous-generation lookup at insert
#   wire    ATTR_NO_WIRE    skb->len and 1 packet, not GSO/GRO segments
#   zone    ATTR_NO_ZONE    zone 0, no zone_of
#   atomic  ATTR_NO_ATOMIC  plain adds and ORs, no lock for new flags
#   clock   ATTR_NO_CLOCK   no jiffies read, no last_seen store
#   macs    ATTR_NO_MACS    no MAC copy at insert
#   full    ATTR_NO_FULL    no known-full check before the insert (bpf/full.h)
#   all     every switch above
#
# AGENTS="once all" also builds flowlens-agent-<variant> with those objects,
# for hack/bench/live -agent (a live side-by-side of a variant).
set -eu
out=${1:?usage: build.sh OUT}
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p "$out"
src=$(mktemp -d)
obj=internal/agent/datapath/datapath_bpfel.o
trap 'rm -rf "$src"' EXIT
cp -r bpf "$src/bpf"
patch -s -d "$src/bpf" -p1 < hack/bench/bpf/attrib/switches.patch
inc="-I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu"
for v in base once prev wire zone atomic clock macs full all; do
	case $v in
	base) d="" ;;
	all) d="-DATTR_NO_ONCE -DATTR_NO_PREV -DATTR_NO_WIRE -DATTR_NO_ZONE -DATTR_NO_ATOMIC -DATTR_NO_CLOCK -DATTR_NO_MACS -DATTR_NO_FULL" ;;
	*) d="-DATTR_NO_$(echo $v | tr a-z A-Z)" ;;
	esac
	clang -O2 -g -Wall -Werror -target bpfel -mcpu=v1 $inc $d -c "$src/bpf/datapath.c" -o "$out/$v.o"
	llvm-strip -g "$out/$v.o"
	printf '{"Replace":{"%s":"%s"}}' "$root/$obj" "$(cd "$out" && pwd)/$v.o" > "$src/overlay.json"
	go build -overlay "$src/overlay.json" -o "$out/bench-bpf-$v" ./hack/bench/bpf
	case " ${AGENTS:-} " in *" $v "*) go build -overlay "$src/overlay.json" -o "$out/flowlens-agent-$v" ./cmd/flowlens-agent ;; esac
done
dis() { llvm-objdump -d --no-show-raw-insn "$1" | grep -v 'file format'; }
dis "$out/base.o" > "$src/a"
dis $obj > "$src/b"
cmp -s "$src/a" "$src/b" || { echo "base.o differs from the committed object's instructions" >&2; exit 1; }
echo "built in $out: $(ls "$out" | tr '\n' ' ')"
