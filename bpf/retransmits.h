/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "retransmits": TCP retransmitted segments, counted on the flow that
 * carries them (local -> remote of the retransmitting socket). Go side:
 * internal/agent/feature/retransmits.
 */
#ifndef FLOWLENS_RETRANSMITS_H
#define FLOWLENS_RETRANSMITS_H

#include "enrich.h"

SEC("tp_btf/tcp_retransmit_skb")
int retransmit(unsigned long long *ctx)
{
	struct flow_key key = {};
	if (sock_key((struct sock *)ctx[0], &key, 0) || !watched(&key, BTF_PTR))
		return 0;
	struct enrich_value *v = enrich_entry(&key, generation());
	if (v)
		v->retransmits += 1; /* under the socket lock */
	return 0;
}

#endif
