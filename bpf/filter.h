/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "flows", the flow filter: which packets the TC programs account,
 * and at which sampling rate, from up to 64 rules (docs/filters.md for the
 * rules, internal/agent/flowrules for their compilation into these tables).
 *
 * A bit-vector classifier: each field the rules use is one lookup giving
 * the set of rules that field allows (bit i = the rule of precedence i);
 * the AND of those sets holds the rules matching the packet, and its lowest
 * bit is the winner. Per packet: two to three array reads per IPv4 address
 * (filter_v4), an LPM-trie lookup per IPv6 one, two array reads for the
 * ports, a few loads for the rest; no loop over the rules, so 64 rules cost
 * what one does. The fields no rule uses are not
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

/* The de Bruijn table of lowest_bit: index of the bit b for b * DEBRUIJN >> 58. */
static const __u8 debruijn64[64] = {
	0,  1,  2,  53, 3,  7,  54, 27, 4,  38, 41, 8,  34, 55, 48, 28,
	62, 5,  39, 46, 44, 42, 22, 9,  24, 35, 59, 56, 49, 18, 29, 11,
	63, 52, 6,  26, 37, 40, 33, 47, 61, 45, 43, 21, 23, 58, 17, 10,
	51, 25, 36, 32, 60, 20, 57, 16, 50, 31, 19, 15, 30, 14, 13, 12,
};

/* lowest_bit returns the index of m's lowest set bit (m != 0): isolate
 * it, then a multiply and a table read instead of six branches. */
static __always_inline __u32 lowest_bit(__u64 m)
{
	return debruijn64[((m & -m) * 0x022fdd63cc95386dULL) >> 58];
}

/* v4_bits returns the filter_v4 entry of IPv4 address a (host order). */
static __always_inline const struct filter_v4_entry *v4_bits(__u32 a)
{
	__u32 i = a >> 16;
	const struct filter_v4_entry *e = bpf_map_lookup_elem(&filter_v4, &i);
	if (e && e->next) {
		i = e->next + ((a >> 8) & 0xff);
		e = bpf_map_lookup_elem(&filter_v4, &i);
	}
	if (e && e->next) {
		i = e->next + (a & 0xff);
		e = bpf_map_lookup_elem(&filter_v4, &i);
	}
	return e;
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
	/* Read once: a volatile const is reloaded at every use (the verifier
	 * then knows its value and drops the dead branches, not the loads). */
	const __u64 used = filter_used;
	__u64 m = c->proto[k->proto] & c->dir[me->dir == DIR_EGRESS];
	if ((used & FILTER_USE_ADDR) && p->eth_type == 0x0800) {
		/* IPv4-mapped: the address is the key's last 4 bytes. */
		const struct filter_v4_entry *s = v4_bits(bpf_ntohl(*(const __u32 *)&k->src_ip[12]));
		const struct filter_v4_entry *d = v4_bits(bpf_ntohl(*(const __u32 *)&k->dst_ip[12]));
		if (!s || !d) /* cannot happen: every address has an entry */
			return 0;
		m &= (s->cidr & d->peer) | (d->cidr & s->peer);
	} else if (used & FILTER_USE_ADDR) {
		struct filter_addr_key ak = {.prefixlen = 128};
		__builtin_memcpy(ak.addr, k->src_ip, 16);
		struct filter_addr_bits *s = bpf_map_lookup_elem(&filter_addr, &ak);
		__builtin_memcpy(ak.addr, k->dst_ip, 16);
		struct filter_addr_bits *d = bpf_map_lookup_elem(&filter_addr, &ak);
		if (!s || !d) /* cannot happen: ::/0 is always in the trie */
			return 0;
		m &= (s->cidr & d->peer) | (d->cidr & s->peer);
	}
	if (used & FILTER_USE_PORTS) {
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
	if (used & FILTER_USE_ICMP) {
		if (k->proto == IPPROTO_ICMP || k->proto == IPPROTO_ICMPV6)
			m &= c->icmp_type[k->icmp_type] & c->icmp_code[k->icmp_code];
		else
			m &= c->icmp_free;
	}
	if (used & FILTER_USE_TCP_FLAGS) {
		if (k->proto == IPPROTO_TCP)
			m &= c->tcp_flags[p->tcp_flags & 0xff];
		else
			m &= c->tcp_free;
	}
	if (used & FILTER_USE_IFACES) {
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
 * 32-63; it counts the match. Inlined (measured: a global function cost
 * the reject path 9 ns); this stays within the verifier's limits because
 * classify and lowest_bit branch only on constants and on map contents.
 */
static __always_inline __u64 flowlens_filter(const struct pkt *p, const struct iface_obs *me)
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
