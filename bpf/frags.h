/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IP fragments in their flow. Only the first fragment of a datagram carries
 * the L4 header; the others carry the same addresses, protocol and IP ID
 * (IPv6: fragment identification). The TC programs remember the first
 * fragment's ports in the LRU map "frags" and give them to the fragments
 * that follow, so a datagram over the MTU counts whole in its flow. A later
 * fragment whose first was not seen (reordered, or sent before the agent
 * started) keeps port 0 and its flow is flagged FLOW_F_FRAG_UNMATCHED.
 * Drops of fragments use the same map (bpf/drops.h).
 */
#ifndef FLOWLENS_FRAGS_H
#define FLOWLENS_FRAGS_H

#include "maps.h"

static __always_inline void frag_key_of(struct frag_key *fk, const struct flow_key *k, __u8 proto, __u32 id)
{
	__builtin_memcpy(fk->src_ip, k->src_ip, 16);
	__builtin_memcpy(fk->dst_ip, k->dst_ip, 16);
	fk->id = id;
	fk->proto = proto;
	fk->_pad[0] = fk->_pad[1] = fk->_pad[2] = 0;
}

/* frag_remember stores the L4 identity of a datagram's first fragment. */
static __always_inline void frag_remember(const struct flow_key *k, __u32 id)
{
	struct frag_key fk;
	struct frag_l4 l4;
	frag_key_of(&fk, k, k->proto, id);
	__builtin_memcpy(&l4, &k->src_port, sizeof(l4)); /* same layout as the key's tail */
	bpf_map_update_elem(&frags, &fk, &l4, BPF_ANY);
}

/* frag_resolve gives a later fragment its first fragment's ports; 0 if the
 * first fragment was not seen. */
static __always_inline int frag_resolve(struct flow_key *k, __u32 id)
{
	struct frag_key fk;
	frag_key_of(&fk, k, k->proto, id);
	struct frag_l4 *l4 = bpf_map_lookup_elem(&frags, &fk);
	if (!l4)
		return 0;
	__builtin_memcpy(&k->src_port, l4, sizeof(*l4));
	return 1;
}

#endif
