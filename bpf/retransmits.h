/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "retransmits": TCP retransmitted segments, counted on the flow that
 * carries them (local -> remote of the retransmitting socket). Go side:
 * internal/agent/feature/retransmits.
 */
#ifndef FLOWLENS_RETRANSMITS_H
#define FLOWLENS_RETRANSMITS_H

#include "enrich.h"

/* 1 when the running kernel's tracepoint has an err argument (Linux 6.11
 * and later): it then fires for every attempt, also for a retransmission
 * that was not sent (-EBUSY while the original is still in a host queue, a
 * failed transmit), which the kernel's RetransSegs does not count either.
 * The agent reads the tracepoint's arity from the kernel's BTF; with 0 the
 * verifier prunes the read of an argument the kernel does not have. */
volatile const __u32 retransmit_err_arg = 0;

SEC("tp_btf/tcp_retransmit_skb")
int retransmit(unsigned long long *ctx)
{
	if (retransmit_err_arg && (int)ctx[2] != 0)
		return 0;
	struct flow_key key = {};
	if (sock_key((struct sock *)ctx[0], &key, 0) || !watched(&key, BTF_PTR))
		return 0;
	struct enrich_value *v = enrich_entry(&key, generation());
	if (v)
		v->retransmits += 1; /* under the socket lock */
	return 0;
}

#endif
