/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The inspections inside the TC programs (features "dns" and "tls") across
 * a NAT (feature "xlat"): what they write goes to the flow's key before
 * NAT, κ(P), the key record() files the packet under (bpf/xlat.h,
 * docs/design/counting.md "Translated packets"), not to the packet's own
 * tuple after NAT, which is no flow (an enrichment entry there would be a
 * partial record of its own, with no packets). The most common case is
 * DNS: a pod's query to the kube-dns ClusterIP, DNATed to a CoreDNS pod.
 *
 * Both inspections run after record(), which leaves κ(P) in the packet's
 * key, except at a hook after NAT that the alias lists (steady): it stops
 * at the alias without following it, and xlat_inspect_key follows it
 * here. And an answer's query: the answer's key κ(A) is its tuple before
 * un-DNAT (backend -> client), whose reverse is the query's tuple after
 * DNAT, an alias (map xlat_alias) naming the query's κ(Q);
 * xlat_query_key maps it. Off (xlat_on 0), neither does anything.
 */
#ifndef FLOWLENS_XLATKEY_H
#define FLOWLENS_XLATKEY_H

#include "xlat.h"

/*
 * xlat_inspect_key rewrites *k, a packet's key after record() in
 * generation gen at hook *me, to its flow's key before NAT when *k is an
 * alias's tuple that this hook follows (xlat_follow's rule: the NAT's
 * namespace's egress, another namespace's ingress; not a stale alias).
 * One flow map lookup: only for packets the inspections read (on the DNS
 * ports; a TLS hello).
 */
static __noinline void xlat_inspect_key(struct flow_key *k, const struct iface_obs *me, __u32 gen)
{
	if (!xlat_on || !k || !me)
		return;
	const struct xlat_flow_alias *a =
		bpf_map_lookup_elem(gen & 1 ? (void *)&flows_b : (void *)&flows_a, k);
	if (!a || !(a->flags & FLOW_F_XLAT_ALIAS) || (a->flags & FLOW_F_XLAT_DEAD))
		return;
	if ((a->to.netns == me->netns) == (me->dir == DIR_INGRESS))
		return; /* before the NAT: a packet of the tuple's own */
	*k = a->to.key;
}

/*
 * xlat_query_key rewrites *k, the reverse of an answer's key whose query
 * is not pending under it, to the key before NAT of the query it stands
 * for, when *k is a tuple after NAT (an alias of map xlat_alias) and
 * returns 1; else 0. Not its freshness: the caller's pending query, by
 * that key and the answer's id, is the proof.
 */
static __always_inline int xlat_query_key(struct flow_key *k)
{
	if (!xlat_on)
		return 0;
	const struct xlat_alias_value *a = bpf_map_lookup_elem(&xlat_alias, k);
	if (!a)
		return 0;
	*k = a->key;
	return 1;
}

#endif
