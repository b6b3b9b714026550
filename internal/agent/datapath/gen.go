package datapath

// The BPF objects are committed; `make generate` rebuilds them (needs clang and
// libbpf headers). -target bpfel covers amd64 and arm64. Every struct and enum
// that Go shares with bpf/ is listed with -type, so its Go mirror is generated
// (types.go gives them their exported names), never copied by hand.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type flow_key -type flow_value -type overflow_rec -type iface_obs -type enrich_value -type clock_sample -type counter -type enrich_counter -type direction -type tcp_markers -type flow_flags -type hook_order -type control_slot -type filter_conf -type filter_addr_key -type filter_addr_bits -type filter_port_bits -type filter_iface_key -type filter_v4_entry -type filter_size -type filter_use -type tls_flags -type dns_state -type tunnel_type -type xlat_alias_value -type xlat_flow_alias -type tcp_conn -type tcp_role -type tcp_conn_state -type tunnel_outer_value -type zone_slot -type zone_const datapath ../../../bpf/datapath.c -- -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel Noop ../../../bpf/noop.c -- -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
