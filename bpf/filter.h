/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "flows", the flow filter: which packets the TC programs account,
 * and at which sampling rate, from up to 64 rules (docs/filters.md for the
 * rules, internal/filter for their compilation into these tables).
 *
 * A bit-vector classifier: each field the rules use is one lookup giving
 * the set of rules that field allows (bit i = the rule of precedence i);
 * the AND of those sets holds the rules matching the packet, and its lowest
 * bit is the winner. Per packet: two LPM-trie lookups for the addresses,
 * two array reads for the ports, a few loads for the rest; no loop over the
 * rules, so 64 rules cost what one does. The fields no rule uses are not
 * compiled in (filter_used is a load-time constant), and with no rules at
 * all (filter_on 0) none of this runs.
 *
 * It runs after parsing and before the flow map is touched, so a rejected
 * packet costs its parse and these lookups, never an insert.
 */
#ifndef FLOWLENS_FILTER_H
#define FLOWLENS_FILTER_H

#include "maps.h"
#include "parse.h"

volatile const __u32 filter_on = 0;   /* rules exist */
volatile const __u64 filter_used = 0; /* FILTER_USE_* */

/* lowest_bit returns the index of m's lowest set bit (m != 0). */
static __always_inline __u32 lowest_bit(__u64 m)
{
	__u32 n = 0;
	if (!(m & 0xffffffffULL)) { n += 32; m >>= 32; }
	if (!(m & 0xffffULL)) { n += 16; m >>= 16; }
	if (!(m & 0xffULL)) { n += 8; m >>= 8; }
	if (!(m & 0xfULL)) { n += 4; m >>= 4; }
	if (!(m & 0x3ULL)) { n += 2; m >>= 2; }
	if (!(m & 0x1ULL)) { n += 1; }
	return n;
}

static __always_inline int has_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

/* classify returns the rules matching the packet at this hook. */
static __always_inline __u64 classify(const struct filter_conf *c, const struct pkt *p,
				      const struct iface_obs *me)
{
	const struct flow_key *k = &p->key;
	__u64 m = c->proto[k->proto] & c->dir[me->dir == DIR_EGRESS];
	if (filter_used & FILTER_USE_ADDR) {
		struct filter_addr_key ak = {.prefixlen = 128};
		__builtin_memcpy(ak.addr, k->src_ip, 16);
		struct filter_addr_bits *s = bpf_map_lookup_elem(&filter_addr, &ak);
		__builtin_memcpy(ak.addr, k->dst_ip, 16);
		struct filter_addr_bits *d = bpf_map_lookup_elem(&filter_addr, &ak);
		if (!s || !d) /* cannot happen: ::/0 is always in the trie */
			return 0;
		m &= (s->cidr & d->peer) | (d->cidr & s->peer);
	}
	if (filter_used & FILTER_USE_PORTS) {
		if (has_ports(k->proto)) {
			__u32 sp = k->src_port, dp = k->dst_port; /* host order (parse.h) */
			struct filter_port_bits *s = bpf_map_lookup_elem(&filter_ports, &sp);
			struct filter_port_bits *d = bpf_map_lookup_elem(&filter_ports, &dp);
			if (!s || !d)
				return 0;
			m &= s->src & d->dst & (s->any | d->any | c->no_any_ports);
		} else {
			m &= c->port_free;
		}
	}
	if (filter_used & FILTER_USE_ICMP) {
		if (k->proto == IPPROTO_ICMP || k->proto == IPPROTO_ICMPV6)
			m &= c->icmp_type[k->icmp_type] & c->icmp_code[k->icmp_code];
		else
			m &= c->icmp_free;
	}
	if (filter_used & FILTER_USE_TCP_FLAGS) {
		if (k->proto == IPPROTO_TCP)
			m &= c->tcp_flags[p->tcp_flags & 0xff];
		else
			m &= c->tcp_free;
	}
	if (filter_used & FILTER_USE_IFACES) {
		struct filter_iface_key ik = {.netns = me->netns, .ifindex = me->ifindex};
		__u64 *b = bpf_map_lookup_elem(&filter_ifaces, &ik);
		m &= b ? *b : c->iface_free;
	}
	return m;
}

/* rate_of returns the sampling rate of flow_value.rule r. */
static __always_inline __u32 rate_of(__u8 r)
{
	__u32 zero = 0;
	const struct filter_conf *c = bpf_map_lookup_elem(&filter_tables, &zero);
	if (!c)
		return 0;
	return r ? c->sampling[(r - 1) & (FILTER_MAX_RULES - 1)] : c->default_sampling;
}

/*
 * flowlens_filter decides a packet's fate: the winning rule + 1 (0: the
 * default action) in bits 0-7, accept in bit 8, the sampling rate in bits
 * 32-63; it counts the match. A global function, so the verifier checks it
 * once, apart from its callers: inlined, its branches multiplied the
 * caller's paths past the verifier's limit.
 */
__attribute__((noinline)) __u64 flowlens_filter(const struct pkt *p, const struct iface_obs *me)
{
	__u32 zero = 0;
	const struct filter_conf *c = bpf_map_lookup_elem(&filter_tables, &zero);
	if (!c || !p || !me) /* cannot happen: a one-entry array; our own stack */
		return 0;
	__u64 m = classify(c, p, me);
	__u32 idx = FILTER_DEFAULT;
	__u64 v;
	if (m) {
		idx = lowest_bit(m) & (FILTER_MAX_RULES - 1);
		v = (idx + 1) | ((c->accept >> idx) & 1) << 8 | (__u64)c->sampling[idx] << 32;
	} else {
		v = (__u64)(c->default_accept & 1) << 8 | (__u64)c->default_sampling << 32;
	}
	__u64 *n = bpf_map_lookup_elem(&filter_counters, &idx);
	if (n)
		*n += 1;
	return v;
}

#endif
