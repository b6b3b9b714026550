package datapath

// The BPF objects are committed; `make generate` rebuilds them (needs clang and
// libbpf headers). -target bpfel covers amd64 and arm64.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type flow_key -type flow_value -type overflow_rec -type iface_obs -type counter Flows ../../bpf/flows.c -- -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type enrich_value Enrich ../../bpf/enrich.c -- -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel Noop ../../bpf/noop.c -- -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
