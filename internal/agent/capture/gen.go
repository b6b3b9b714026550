package capture

// The BPF object is committed like internal/agent/datapath's; `make generate`
// rebuilds it (needs clang and libbpf headers). It is its own object: the
// capture program shares nothing with the flow programs but the hooks.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type cap_meta -type cap_count capture ../../../bpf/capture.c -- -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
