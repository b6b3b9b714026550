// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The flowlens datapath: one BPF object holding every feature's programs,
 * all sharing the maps of maps.h. Each feature has its own header and its
 * own Go package (internal/agent/feature/<name>), and the agent loads each program
 * on its own, so a program the kernel refuses takes nothing else down.
 *
 *   flows.h        TC ingress/egress: packets -> flows (always on), with
 *                  wire.h (wire packets and bytes), frags.h (fragments in
 *                  their flow), order.h (which hook counts a packet),
 *                  tunnel.h (overlay packets in their inner flow),
 *                  filter.h (the flow filter rules), xlat.h (feature
 *                  "xlat": conntrack NAT translation), tls.h (feature "tls":
 *                  TLS handshakes and QUIC), dns.h (feature "dns"), tcp.h
 *                  (feature "tcp": TCP connection health, and its
 *                  tp_btf/inet_sock_set_state), all four inside the TC
 *                  programs
 *   drops.h        tp_btf/kfree_skb, tracepoint fallback
 *   rtt.h          fentry/tcp_rcv_established, tp_btf/tcp_probe fallback
 *   retransmits.h  tp_btf/tcp_retransmit_skb
 *   clock.h        syscall program: jiffies and CLOCK_MONOTONIC, for the agent
 *
 * A new feature adds its header here and its Go package to
 * internal/agent/feature/registry.
 */
#include "types.h"
#include "maps.h"
#include "flows.h"
#include "drops.h"
#include "rtt.h"
#include "retransmits.h"
#include "clock.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Make bpf2go emit the shared types and constants (-type in internal/agent/datapath/gen.go). */
const struct overflow_rec *unused_overflow_rec __attribute__((unused));
const struct enrich_value *unused_enrich_value __attribute__((unused));
const struct clock_sample *unused_clock_sample __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));
const enum enrich_counter *unused_enrich_counter __attribute__((unused));
const enum direction *unused_direction __attribute__((unused));
const enum tcp_markers *unused_tcp_markers __attribute__((unused));
const enum flow_flags *unused_flow_flags __attribute__((unused));
const enum hook_order *unused_hook_order __attribute__((unused));
const enum control_slot *unused_control_slot __attribute__((unused));
const enum filter_size *unused_filter_size __attribute__((unused));
const enum filter_use *unused_filter_use __attribute__((unused));
const enum tls_flags *unused_tls_flags __attribute__((unused));
const enum dns_state *unused_dns_state __attribute__((unused));
const enum tunnel_type *unused_tunnel_type __attribute__((unused));
const struct tcp_conn *unused_tcp_conn __attribute__((unused));
const enum tcp_role *unused_tcp_role __attribute__((unused));
const enum tcp_conn_state *unused_tcp_conn_state __attribute__((unused));
const struct xlat_flow_alias *unused_xlat_flow_alias __attribute__((unused));
const enum zone_const *unused_zone_const __attribute__((unused));
