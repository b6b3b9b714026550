/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Where a new flow map value is built before its insert: a per-CPU buffer
 * (map flow_build), not the stack. The TC programs' deepest call chain
 * (handle, xlat_via, xlat_note) used 504 of the verifier's 512 bytes with
 * the 168-byte value on the stack of flowlens_insert, xlat_note and
 * xlat_alias_put (docs/benchmarks.md §39, §46); here it costs none.
 *
 * Why one buffer per CPU is enough (docs/design/datapath.md, "The build
 * buffer"): only the TC programs use it (flowlens_insert, xlat_note,
 * xlat_alias_put; no tracing program of the object does), and each use is
 * a build followed by the one bpf_map_update_elem that copies it out,
 * inside one program run. A TC program runs with bottom halves off (in the
 * receive softirq, or under __dev_queue_xmit's rcu_read_lock_bh) and
 * migration off, so no other TC program runs on its CPU until it returns:
 * no run of ours can overwrite the buffer between a build and its insert.
 * Nothing between the two can start one on this CPU either: the helpers
 * called there (the skb's MACs, the lock-free control and counter reads)
 * transmit nothing. A tracing program that interrupts a TC program never
 * touches the buffer.
 *
 * Each use starts with flow_build_value(), which zeroes the whole buffer: no
 * field of the previous value built on this CPU reaches a new one
 * (TestBuildBufferNoLeak, internal/agent/datapath). The map is declared
 * with the others in bpf/maps.h; the update copies its words around the
 * flow map value's lock.
 */
#ifndef FLOWLENS_BUILD_H
#define FLOWLENS_BUILD_H

#include "maps.h" /* flow_build */

/* flow_build_value returns this CPU's build buffer, zeroed, as a flow value
 * (an alias casts it). NULL cannot happen (a one-entry array), but the
 * verifier asks. The lookup is inlined by the verifier (no helper call). */
static __always_inline struct flow_value *flow_build_value(void)
{
	__u32 zero = 0;
	struct flow_build *b = bpf_map_lookup_elem(&flow_build, &zero);
	if (b)
		__builtin_memset(b, 0, sizeof(*b));
	return (struct flow_value *)b;
}

#endif
