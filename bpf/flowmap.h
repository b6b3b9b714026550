/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The flow map of a generation for a key, in one place: every access of
 * the TC programs and the enrichment hooks to the flow maps goes through
 * these helpers (docs/design/eviction.md, "The flow maps").
 *
 * A flow is keyed everywhere on its struct flow_key (40 bytes, IPv4
 * addresses IPv4-mapped). The maps are two per generation: an IPv4 flow,
 * whose two addresses are IPv4-mapped, lives in flows4_a/_b under its
 * 16-byte struct flow_key4; every other key in flows_a/_b under the
 * flow_key itself. The choice is a function of the key alone, so a key
 * has one entry whatever path looks it up (an xlat alias's or note's
 * too: bpf/xlat.h), and the evictor, which reads both maps and turns a
 * flow_key4 back into its IPv4-mapped flow_key, produces the records it
 * produced from one map. Why: the htab hashes and compares 16 bytes
 * instead of 40, and the element's header and key share its first cache
 * line, one cache miss less per cold lookup (docs/benchmarks.md §37, §40).
 *
 * A full map is known per family (CTL_FLOWS4_FULL, CTL_FLOWS_FULL): a full
 * IPv4 map does not stop IPv6 inserts, and the reverse.
 *
 * The 16-byte key is built on the caller's stack at each access (4 loads,
 * 2 tests, 4 stores: per packet only once, in record's lookup).
 */
#ifndef FLOWLENS_FLOWMAP_H
#define FLOWLENS_FLOWMAP_H

#include <bpf/bpf_endian.h>
#include "maps.h"
#include "full.h"

/*
 * fm_key4 tells whether *k is an IPv4 flow's key (both addresses
 * IPv4-mapped) and then writes its struct flow_key4 to *k4. struct flow_key
 * is 8-byte aligned, so the loads are whole words (a stack access must be
 * aligned for the verifier).
 */
static __always_inline int fm_key4(const struct flow_key *k, struct flow_key4 *k4)
{
	_Static_assert(__builtin_offsetof(struct flow_key, src_port) == 32 && sizeof(struct flow_key) == 40 &&
			       __builtin_offsetof(struct flow_key4, src_port) == 8 && sizeof(struct flow_key4) == 16,
		       "flow_key4's last 8 bytes are flow_key's");
	const __u32 *s = (const __u32 *)k->src_ip;
	const __u32 *d = (const __u32 *)k->dst_ip;
	if ((*(const __u64 *)s | *(const __u64 *)d) != 0 || s[2] != bpf_htonl(0xffff) || d[2] != bpf_htonl(0xffff))
		return 0;
	k4->src_ip = s[3];
	k4->dst_ip = d[3];
	*(__u64 *)&k4->src_port = *(const __u64 *)&k->src_port;
	return 1;
}

/*
 * fm_lookup looks key k up in generation gen's flow map (only gen's parity
 * matters: gen ^ 1 is the other generation's). Inlined: with a constant
 * parity, each call site names one map, whose lookup the verifier inlines
 * (a call site that may see two maps is left a helper call, +15 ns on the
 * hot path: docs/benchmarks.md §40). The asm statement (a move of the
 * register to itself) after the IPv4 branch's call keeps clang from merging
 * the two families' calls into one call on a selected map.
 */
static __always_inline void *fm_lookup(__u32 gen, const struct flow_key *k)
{
	struct flow_key4 k4;
	void *v;
	if (fm_key4(k, &k4)) {
		v = gen & 1 ? bpf_map_lookup_elem(&flows4_b, &k4) : bpf_map_lookup_elem(&flows4_a, &k4);
		asm volatile("%0 = %0" : "+r"(v)); /* not the IPv6 branch's tail */
	} else {
		v = gen & 1 ? bpf_map_lookup_elem(&flows_b, k) : bpf_map_lookup_elem(&flows_a, k);
	}
	return v;
}

/*
 * fm_build returns the per-CPU buffer (map flow_build) a new flow map value
 * is built in, zeroed: a struct flow_value (or an xlat alias) whose 24
 * bytes after it stay zero, the IPv4 maps' padding. NULL cannot happen (a
 * one-entry array), but the verifier asks.
 */
static __always_inline struct flow_value *fm_build(void)
{
	__u32 zero = 0;
	struct flow_build *b = bpf_map_lookup_elem(&flow_build, &zero);
	if (b)
		__builtin_memset(b, 0, sizeof(*b));
	return (struct flow_value *)b;
}

/*
 * fm_insert inserts value *b (built by fm_build) under key k into
 * generation gen's flow map, unless k has an entry there (-EEXIST) or the
 * map is known full (-E2BIG, bpf/full.h). Counts the entry
 * (CNT_NEW_FLOWS: the maps' fill) and notes a full map (its family's
 * slot). Returns the update's error.
 */
static __always_inline long fm_insert(__u32 gen, const struct flow_key *k, const struct flow_value *b)
{
	struct flow_key4 k4;
	int v4 = fm_key4(k, &k4);
	__u32 slot = v4 ? CTL_FLOWS4_FULL : CTL_FLOWS_FULL;
	if (full_known(slot, gen))
		return -E2BIG_;
	long err;
	if (v4)
		err = gen & 1 ? bpf_map_update_elem(&flows4_b, &k4, b, BPF_NOEXIST)
			      : bpf_map_update_elem(&flows4_a, &k4, b, BPF_NOEXIST);
	else
		err = gen & 1 ? bpf_map_update_elem(&flows_b, k, b, BPF_NOEXIST)
			      : bpf_map_update_elem(&flows_a, k, b, BPF_NOEXIST);
	if (err == 0) {
		__u32 idx = CNT_NEW_FLOWS; /* an entry of the maps: their fill */
		__u64 *c = bpf_map_lookup_elem(&counters, &idx);
		if (c)
			*c += 1;
	} else {
		full_note(slot, gen, err);
	}
	return err;
}

#endif
