/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What the enrichment features (drops, RTT, retransmits; next: DNS, NAT
 * translation...) share: the active generation, the entry of a flow in the
 * active enrichment map, reading kernel structs, and the key of a socket's
 * flow. The hooks never write the flow maps: they write the enrichment maps,
 * keyed by the same 7-tuple, which the agent evicts in the same cycle as the
 * flows and merges by key.
 */
#ifndef FLOWLENS_ENRICH_H
#define FLOWLENS_ENRICH_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "core.h"
#include "full.h"
#include "zone.h"

#define AF_INET 2
#define AF_INET6 10

#define BTF_PTR 1
#define RAW_PTR 0

/*
 * enrich_unwatched 1 (--enrich-unwatched): the socket-side hooks (drops,
 * RTT, retransmits), which see the whole host whatever the agent watches,
 * record every flow. 0, the default: only flows a watched interface
 * carried (watched, below), so that a socket whose packets cross no
 * watched interface (the host's or a pod's loopback when lo is not
 * watched, a namespace not in --netns) makes no record (issue #29).
 */
volatile const __u32 enrich_unwatched = 0;

/*
 * watched tells whether a watched interface carried the flow of key: it has
 * an entry in a flow map (this generation's, or the previous one until the
 * agent empties it) or went through the overflow ring lately
 * (overflow_seen). The TC programs write those maps only for packets on
 * watched interfaces. An event of another flow is counted
 * (ENRICH_UNWATCHED), not recorded. Not for the hooks inside the TC
 * programs (DNS, TLS, xlat): their packet is on a watched interface, and
 * its flow may not be inserted yet.
 */
static __always_inline int watched(const struct flow_key *key, int mode)
{
	/* A classic tracepoint (mode RAW_PTR, the drops fallback) may not use
	 * maps whose values hold a bpf_spin_lock, as the flow maps' do: it
	 * records every flow, as --enrich-unwatched (a stated limit). */
	if (enrich_unwatched || mode == RAW_PTR)
		return 1;
	/* An alias of feature xlat (bpf/xlat.h) is no flow: its tuple is
	 * watched only as a flow of its own. */
	const struct flow_value *v = bpf_map_lookup_elem(&flows_a, key);
	if (v && !(v->flags & FLOW_F_XLAT_ALIAS))
		return 1;
	v = bpf_map_lookup_elem(&flows_b, key);
	if ((v && !(v->flags & FLOW_F_XLAT_ALIAS)) || bpf_map_lookup_elem(&overflow_seen, key))
		return 1;
	__u32 idx = ENRICH_UNWATCHED;
	__u64 *n = bpf_map_lookup_elem(&enrich_counters, &idx);
	if (n)
		*n += 1; /* per-CPU: no other writer */
	return 0;
}

static __always_inline __u32 generation(void)
{
	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&control, &zero);
	return gen ? *gen : 0;
}

/* enrich_insert inserts key's zero entry into m, the enrichment map of
 * generation gen, unless m is known full (bpf/full.h), and returns it (NULL:
 * counted lost). Not inlined: once per key and generation, and the hooks
 * call enrich_entry from many places. */
static __noinline struct enrich_value *enrich_insert(void *m, const struct flow_key *key, __u32 gen)
{
	__u32 lost_idx = ENRICH_LOST;
	struct enrich_value *v = NULL;
	/* The zero value from a map, not the stack: the value is 232 bytes,
	 * and the TC programs' call chains have 512 for all their frames. */
	__u32 zero = 0;
	const struct enrich_value *zv = bpf_map_lookup_elem(&enrich_zero, &zero);
	if (zv && !full_known(CTL_ENRICH_FULL, gen)) {
		long err = bpf_map_update_elem(m, key, zv, BPF_NOEXIST); /* -EEXIST: another CPU won; fine */
		full_note(CTL_ENRICH_FULL, gen, err);
		v = bpf_map_lookup_elem(m, key);
	}
	if (!v) {
		__u64 *lost = bpf_map_lookup_elem(&enrich_counters, &lost_idx);
		if (lost)
			*lost += 1; /* per-CPU: no other writer */
	}
	return v;
}

/* The entry of key in the enrichment map of generation gen (inserted when
 * missing); NULL if it cannot be inserted. */
static __always_inline struct enrich_value *enrich_entry(const struct flow_key *key, __u32 gen)
{
	void *m = (gen & 1) ? (void *)&enrich_b : (void *)&enrich_a;
	struct enrich_value *v = bpf_map_lookup_elem(m, key);
	if (v)
		return v;
	return enrich_insert(m, key, gen);
}

/*
 * Reading kernel structs. tp_btf and fentry programs get BTF-typed pointers
 * and dereference them directly: a load whose offset CO-RE relocates and the
 * verifier makes fault-safe (PROBE_MEM), no helper call. The classic
 * tracepoint gets the skb as a plain number, so it must go through
 * bpf_probe_read_kernel (BPF_CORE_READ). Code shared by both takes the mode
 * as a constant argument; __always_inline leaves one branch per program.
 */
#define RD(mode, p, field) ((mode) == BTF_PTR ? (p)->field : BPF_CORE_READ(p, field))

static __always_inline void v4mapped(__u8 *dst, __u32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &addr, 4);
}

/* Word loads: a memcpy from the byte array would be 16 one-byte loads (the
 * array's alignment is 1). */
static __always_inline void copy6(__u8 *dst, const struct in6_addr___fl *a)
{
	__u32 w[4] = {a->in6_u.u6_addr32[0], a->in6_u.u6_addr32[1],
		      a->in6_u.u6_addr32[2], a->in6_u.u6_addr32[3]};
	__builtin_memcpy(dst, w, 16);
}

/*
 * sock_key builds the key of a TCP socket's flow. inbound: the flow of the
 * packets the socket receives (remote -> local); otherwise the flow of the
 * packets it sends (local -> remote). IPv4-mapped IPv6 sockets already store
 * addresses in the key's format. sk must be a BTF pointer (tp_btf, fentry).
 */
static __always_inline int sock_key(const struct sock *sk, struct flow_key *k, int inbound)
{
	const struct sock_common *c = &sk->__sk_common;
	__u16 family = c->skc_family;
	__u8 local[16], remote[16];
	if (family == AF_INET) {
		v4mapped(local, c->skc_rcv_saddr);
		v4mapped(remote, c->skc_daddr);
	} else if (family == AF_INET6) {
		copy6(local, &c->skc_v6_rcv_saddr);
		copy6(remote, &c->skc_v6_daddr);
	} else {
		return -1;
	}
	__u16 lport = c->skc_num;
	__u16 rport = bpf_ntohs(c->skc_dport);
	if (inbound) {
		__builtin_memcpy(k->src_ip, remote, 16);
		__builtin_memcpy(k->dst_ip, local, 16);
		k->src_port = rport;
		k->dst_port = lport;
	} else {
		__builtin_memcpy(k->src_ip, local, 16);
		__builtin_memcpy(k->dst_ip, remote, 16);
		k->src_port = lport;
		k->dst_port = rport;
	}
	k->proto = IPPROTO_TCP;
	/* The zone the TC programs give the socket's packets (bpf/zone.h):
	 * its namespace's loopback zone when they go out or arrive on
	 * loopback, its output route's device (sk_dst_cache, NULL until it
	 * sends and after a route change) or the device its packets arrive on
	 * (5.18+; a connecting socket's was seen unset); else its namespace's
	 * domain. */
	const struct sock *u = UNTRUSTED(sk, struct sock); /* its pointer fields (bpf/core.h) */
	struct dst_entry *dst = u->sk_dst_cache;
	int lo = (dst && dst->dev && dst->dev->ifindex == LOOPBACK_IFINDEX) ||
		 (bpf_core_field_exists(sk->sk_rx_dst_ifindex) && sk->sk_rx_dst_ifindex == LOOPBACK_IFINDEX);
	k->zone = zone_of(lo ? LOOPBACK_IFINDEX : 0, u->__sk_common.skc_net.net->net_cookie);
	return 0;
}

#endif
