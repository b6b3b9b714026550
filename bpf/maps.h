/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every map of the flowlens datapath, declared once. The agent creates each
 * of them once (internal/agent/datapath, maps.go: the one table of maps) and hands
 * the same map to every program it loads, whatever feature the program
 * belongs to.
 *
 * The double buffers: two flow maps (flows_a, flows_b) and two enrichment
 * maps (enrich_a, enrich_b). control[0] is a generation counter the agent
 * increments at each eviction; its parity picks the active map of each pair
 * (odd: the _b maps). The agent reads the inactive pair only after an RCU
 * grace period, when no program writes it (docs/design/eviction.md).
 */
#ifndef FLOWLENS_MAPS_H
#define FLOWLENS_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

#define DEFINE_FLOW_MAP(name)                          \
	struct {                                       \
		__uint(type, BPF_MAP_TYPE_HASH);       \
		__type(key, struct flow_key);          \
		__type(value, struct flow_value);      \
		__uint(max_entries, 1);                \
	} name SEC(".maps")

/* max_entries is set at load from --cache-max-flows. */
DEFINE_FLOW_MAP(flows_a);
DEFINE_FLOW_MAP(flows_b);

/* Where the TC programs build a new flow map value before its insert,
 * per CPU, instead of on their stack (bpf/build.h). Raw words: a per-CPU
 * map's value may not hold a bpf_spin_lock. */
struct flow_build {
	__u64 w[sizeof(struct flow_value) / 8];
};
_Static_assert(sizeof(struct flow_build) == sizeof(struct flow_value), "a flow map value fits the build buffer");
_Static_assert(sizeof(struct xlat_flow_alias) == sizeof(struct flow_value), "an alias is built there too");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct flow_build);
	__uint(max_entries, 1);
} flow_build SEC(".maps");

/* The slots of control: enum control_slot (bpf/types.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, CTL_SLOTS);
} control SEC(".maps");

/* Per-CPU counters of the TC programs, indexed by enum counter. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, CNT_MAX);
} counters SEC(".maps");

/* Packets that found the flow map full (struct overflow_rec). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} overflow SEC(".maps");

/*
 * The flows that went through the overflow ring, with the counting
 * observation the evictor's aggregation of the ring gives them
 * (internal/agent/evictor/overflow.go), per generation: insert inherits it as it
 * inherits from the previous flow map, which has no entry for such a flow
 * (bpf/flows.h, remember). Only the latest generations matter, so an LRU
 * forgets the rest without the agent's help. 16384 flows (about 1.8 MiB
 * preallocated: 112-byte elements): an entry must outlive a packet's transit
 * between two hooks (microseconds) to stop its double count, and a
 * generation to keep the aggregation's counting point; it is pushed out only
 * by about 16k other flows overflowing after it (fewer on a large machine:
 * the kernel's LRU keeps up to 128 free nodes per CPU aside), the residual
 * limit of docs/design/eviction.md (Pressure).
 */
struct overflow_seen {
	struct iface_obs obs; /* the counting observation (dir: its direction) */
	__u32 gen;            /* the generation it is of */
	__u32 counted;        /* 1 once the aggregation counted a packet on it */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct overflow_seen);
	__uint(max_entries, 16384);
} overflow_seen SEC(".maps");

/*
 * The ports of recent first fragments, so the fragments that follow count in
 * the same flow (bpf/frags.h). LRU: a datagram whose later fragments never
 * come is forgotten without the agent's help; 16384 datagrams in flight at
 * once per node is far above what reassembly itself allows by default
 * (net.ipv4.ipfrag_high_thresh, 4 MiB).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag_key);
	__type(value, struct frag_l4);
	__uint(max_entries, 16384);
} frags SEC(".maps");

/*
 * The flow filter's tables (bpf/filter.h), written by the agent before it
 * attaches the programs and never after (changed rules roll the agent). The
 * sizes are set at load: one entry each while no rule needs them.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct filter_conf);
	__uint(max_entries, 1);
} filter_tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct filter_addr_key);
	__type(value, struct filter_addr_bits);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} filter_addr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct filter_v4_entry);
	__uint(max_entries, 1);
} filter_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct filter_port_bits);
	__uint(max_entries, 1);
} filter_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct filter_iface_key);
	__type(value, __u64);
	__uint(max_entries, 1);
} filter_ifaces SEC(".maps");

/* Packets each rule matched (FILTER_DEFAULT: none did), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, FILTER_COUNTERS);
} filter_counters SEC(".maps");

/* The enrichment double buffer: sized from --cache-max-flows when a feature
 * needs it, else one entry (no memory for disabled hooks). */
#define DEFINE_ENRICH_MAP(name)                          \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_HASH);         \
		__type(key, struct flow_key);            \
		__type(value, struct enrich_value);      \
		__uint(max_entries, 1);                  \
		__uint(map_flags, BPF_F_NO_PREALLOC);    \
	} name SEC(".maps")

DEFINE_ENRICH_MAP(enrich_a);
DEFINE_ENRICH_MAP(enrich_b);

/* One enrichment value, all zero (never written): what a new entry starts
 * as (bpf/enrich.h), so the hooks do not build it on their stack. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct enrich_value);
	__uint(max_entries, 1);
} enrich_zero SEC(".maps");

/* Per-CPU counters of the enrichment hooks, indexed by enum enrich_counter. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, ENRICH_CNT_MAX);
} enrich_counters SEC(".maps");

/* DNS queries awaiting their answer (bpf/dns.h). A plain hash, not an
 * LRU: the agent removes each query whose timeout has expired at every
 * eviction (reporting it as a timeout), and a query that finds the map full
 * is counted (ENRICH_DNS_FULL), where an LRU would forget an older one
 * without a trace. Sized at load when the dns feature is on
 * (Hook.MapSizes), else one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct dns_pending_key);
	__type(value, struct dns_pending_value);
	__uint(max_entries, 1);
} dns_pending SEC(".maps");

/* DNS answers for the agent's address -> name cache (bpf/dns.h,
 * struct dns_answer): one record per answer, at its counting hook; a full
 * ring counts ENRICH_DNS_ANSWERS_LOST. Sized at load when the dns feature
 * hands answers on (internal/agent/feature/dns, AnswerRingBytes), else
 * one page, the smallest ring. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} dns_answers SEC(".maps");

/* Feature "xlat" (bpf/xlat.h): a packet's tuple after NAT -> its flow's
 * key, the tuple before NAT. LRU: an alias it forgets is written again by
 * the next packet where conntrack is (the namespace of the NAT, which a
 * packet crosses before the other namespaces). Sized at load when xlat is
 * on to --cache-max-flows (internal/agent/feature/xlat, Plan), else one
 * entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct xlat_alias_value);
	__uint(max_entries, 1);
} xlat_alias SEC(".maps");

/* Feature "tcp" (bpf/tcp.h): the connections seen open, by the client's
 * flow, across generations. An LRU: a connection whose end was not seen
 * is forgotten without the agent's help. Sized at load when the feature is
 * on (Hook.MapSizes), else one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct tcp_conn);
	__uint(max_entries, 1);
} tcp_conns SEC(".maps");

/* Feature "tcp": the acknowledgement number of each flow's last zero-window
 * segment, so that the answers to window probes are not counted again. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, __u32);
	__uint(max_entries, 1);
} tcp_zwin SEC(".maps");

/* The RTT hook's per-socket memory (bpf/rtt.h). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct rtt_sample);
} rtt_seen SEC(".maps");

#endif
