/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "rtt": the smoothed RTT of TCP sockets, recorded on the flow of the
 * packets the socket receives (remote -> local). Go side: internal/agent/feature/rtt.
 */
#ifndef FLOWLENS_RTT_H
#define FLOWLENS_RTT_H

#include "enrich.h"

/*
 * Per-socket memory of the RTT hook (struct rtt_sample, map rtt_seen in
 * maps.h): the srtt it last stored in an enrichment entry and the generation
 * of that entry's map. The hook runs on
 * every received segment but srtt changes far less often, so a sample equal
 * to what this generation's entry already holds (rtt_ns = srtt, rtt_max_ns
 * >= srtt) is skipped without touching the enrichment map. A new generation
 * always writes: its map was emptied by the agent before it became active.
 * The full counter is compared, not its parity: two generations apart the
 * same map is active again, but empty. (The counter is a __u32: a false skip
 * would need a socket idle across exactly 2^32 evictions.)
 */
static __always_inline int record_rtt(struct sock *sk)
{
	/* srtt_us lies beyond struct sock: the verifier wants a tcp_sock pointer. */
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	__u32 srtt_us = tp->srtt_us >> 3;
	if (srtt_us == 0) /* no RTT sample yet */
		return 0;
	__u32 gen = generation();
	/* A new storage is zeroed: srtt_us 0 never matches a sample. Updates
	 * run under the socket lock, like the entry's. */
	struct rtt_sample *seen = bpf_sk_storage_get(&rtt_seen, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (seen && seen->srtt_us == srtt_us && seen->gen == gen)
		return 0;
	struct flow_key key = {};
	if (sock_key(sk, &key, 1))
		return 0;
	if (!watched(&key, BTF_PTR)) {
		/* Remembered like a stored sample: the same srtt is not looked
		 * up again this generation. */
		if (seen) {
			seen->srtt_us = srtt_us;
			seen->gen = gen;
		}
		return 0;
	}
	struct enrich_value *v = enrich_entry(&key, gen);
	if (!v)
		return 0; /* not recorded in seen: the next sample retries */
	__u64 rtt = (__u64)srtt_us * 1000;
	v->rtt_ns = rtt;
	if (rtt > v->rtt_max_ns)
		v->rtt_max_ns = rtt;
	if (seen) {
		seen->srtt_us = srtt_us;
		seen->gen = gen;
	}
	return 0;
}

/* Preferred: fentry costs less than a tracepoint; refused on some kernels. */
SEC("fentry/tcp_rcv_established")
int rtt_fentry(unsigned long long *ctx)
{
	return record_rtt((struct sock *)ctx[0]);
}

/* Fallback: the tcp_probe tracepoint fires in the same place. */
SEC("tp_btf/tcp_probe")
int rtt_tcp_probe(unsigned long long *ctx)
{
	return record_rtt((struct sock *)ctx[0]);
}

#endif
