package main

// The BPF objects are committed like internal/agent/datapath's; `go generate ./hack/bench/bpf`
// rebuilds them (needs clang and libbpf headers: make deps-bpf).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel Driver csrc/driver.c -- -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type flow_key Mapchoice csrc/mapchoice.c -- -I../../../bpf -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type flow_key -type key16 Hashkey csrc/hashkey.c -- -I../../../bpf -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
