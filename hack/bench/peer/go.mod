// The peer of make bench-bpf: pins NetObserv's eBPF agent, whose committed
// BPF object (pkg/ebpf/bpf_<arch>_bpfel.o) bench-bpf runs beside flowlens'
// program. A module of its own, so the agent's go.mod does not depend on it.
// The checksum database has no entry for this version: go.sum, written once
// with GONOSUMDB=github.com/netobserv, is what verifies it.
module github.com/flowlens/flowlens/hack/bench/peer

go 1.26.8

require github.com/netobserv/netobserv-ebpf-agent v1.10.0-community
