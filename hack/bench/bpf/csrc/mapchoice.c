// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The enrichment map choice (docs/design/enrichment.md, bpf/drops.h (enrich_entry: bpf/enrich.h)): the drop
 * counters live in one shared hash updated with atomic adds. The alternative
 * is a per-CPU hash with plain adds. These programs do exactly the map part
 * of record_drop() (look up, insert on a miss, add to the two counters,
 * store the cause) on a key derived from a counter, so BPF_PROG_TEST_RUN
 * measures the map choice alone, on one CPU or on every CPU at once.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* struct enrich_value: bpf/types.h, the datapath's own. */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct flow_key);
	__type(value, struct enrich_value);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} shared SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct flow_key);
	__type(value, struct enrich_value);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} percpu SEC(".maps");

volatile const __u32 n = 1;      /* keys cycled through */
volatile const __u32 stride = 0; /* < n, coprime with n */
volatile const __u32 first = 0;

/* Per CPU, so concurrent runs on two CPUs walk the keys independently. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} cursor SEC(".maps");

static __always_inline int next_key(struct flow_key *k)
{
	__u32 zero = 0;
	__u32 *c = bpf_map_lookup_elem(&cursor, &zero);
	if (!c)
		return -1;
	__u32 i = *c + stride;
	if (i >= n)
		i -= n;
	*c = i;
	__builtin_memset(k, 0, sizeof(*k));
	k->src_ip[10] = 0xff;
	k->src_ip[11] = 0xff;
	__u32 v = first + i;
	__builtin_memcpy(&k->src_ip[12], &v, 4);
	k->dst_ip[10] = 0xff;
	k->dst_ip[11] = 0xff;
	k->dst_ip[12] = 10;
	k->dst_ip[15] = 1;
	k->src_port = 40000;
	k->dst_port = 80;
	k->proto = 6;
	return 0;
}

/* Inserts that failed (as enrich_entry() in bpf/drops.h (enrich_entry: bpf/enrich.h), the event is then
 * not recorded): no-prealloc maps allocate, and the allocator's per-CPU
 * cache refills asynchronously, so a burst of inserts can find it empty. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} failed SEC(".maps");

static __always_inline struct enrich_value *entry(void *m, const struct flow_key *k)
{
	struct enrich_value *v = bpf_map_lookup_elem(m, k);
	if (v)
		return v;
	struct enrich_value zv = {};
	bpf_map_update_elem(m, k, &zv, BPF_NOEXIST);
	v = bpf_map_lookup_elem(m, k);
	if (!v) {
		__u32 zero = 0;
		__u64 *f = bpf_map_lookup_elem(&failed, &zero);
		if (f)
			*f += 1;
	}
	return v;
}

SEC("tc")
int shared_atomic(struct __sk_buff *skb)
{
	struct flow_key k;
	if (next_key(&k))
		return TC_ACT_SHOT;
	struct enrich_value *v = entry(&shared, &k);
	if (!v)
		return TC_ACT_UNSPEC;
	__sync_fetch_and_add(&v->drop_packets, 1);
	__sync_fetch_and_add(&v->drop_bytes, skb->len);
	v->drop_cause = 3;
	return TC_ACT_UNSPEC;
}

SEC("tc")
int percpu_plain(struct __sk_buff *skb)
{
	struct flow_key k;
	if (next_key(&k))
		return TC_ACT_SHOT;
	struct enrich_value *v = entry(&percpu, &k);
	if (!v)
		return TC_ACT_UNSPEC;
	v->drop_packets += 1;
	v->drop_bytes += skb->len;
	v->drop_cause = 3;
	return TC_ACT_UNSPEC;
}

/* The floor for this comparison: the key construction alone. */
SEC("tc")
int key_only(struct __sk_buff *skb)
{
	struct flow_key k;
	if (next_key(&k))
		return TC_ACT_SHOT;
	asm volatile("" : : "r"(&k) : "memory");
	return TC_ACT_UNSPEC;
}
