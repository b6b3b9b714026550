/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "flows": the TC programs. They aggregate every packet of the node's
 * interfaces into flows keyed on the 7-tuple, in the active flow map (one
 * shared hash, a spin lock per value), counted once on the flow's first
 * (interface, direction). See docs/architecture.md for the dedup rule and
 * the eviction scheme.
 */
#ifndef FLOWLENS_FLOWS_H
#define FLOWLENS_FLOWS_H

#include <linux/pkt_cls.h>
#include "maps.h"
#include "parse.h"

/* Load-time configuration (rewritten by the agent before loading). */
volatile const __u32 sampling = 1;     /* 1:N; 1 = every packet */
/*
 * The network namespace cookie of the interfaces this program instance is
 * attached to: the agent loads one instance per namespace. (In tc programs,
 * bpf_get_netns_cookie(skb) gives the socket's namespace, or the initial one
 * for packets without a socket, not the device's.)
 */
volatile const __u64 netns_cookie = 0;

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1;
}

static __always_inline int same_iface(const struct iface_obs *a, const struct iface_obs *b)
{
	return a->ifindex == b->ifindex && a->netns == b->netns;
}

/*
 * apply adds one packet to an existing flow (see the fast path below). Only
 * the packet's first (interface, direction) observation counts; other
 * observations are recorded in ifaces[]. Returns 1 when a seventh interface
 * could not be recorded (counted by the caller: no helper under the lock).
 */
static __always_inline int apply(struct flow_value *v, const struct pkt *p,
				 const struct iface_obs *me, __u32 len, __u64 now)
{
	int lost_iface = 0;

	/*
	 * Fast path, the common case: a packet at the flow's counting point,
	 * without the spin lock (measured: -55 ns/packet, docs/benchmarks.md).
	 * ifaces[0]'s identity and first_dir never change after the insert, so
	 * they can be read unlocked; the counters take atomic adds; last_seen is
	 * a plain store (a racing CPU may store an older coarse tick: off by one
	 * tick at most); TCP flags take the lock only when the packet brings a
	 * flag the flow has not seen yet. The evictor reads a map only after
	 * the RCU grace period, when no CPU writes it, so its reads are whole.
	 */
	if (same_iface(&v->ifaces[0], me) && v->first_dir == me->dir) {
		__sync_fetch_and_add(&v->bytes, len);
		__sync_fetch_and_add(&v->packets, 1);
		if (v->last_seen_ns != now)
			v->last_seen_ns = now;
		if ((v->tcp_flags | p->tcp_flags) != v->tcp_flags) {
			bpf_spin_lock(&v->lock);
			v->tcp_flags |= p->tcp_flags;
			bpf_spin_unlock(&v->lock);
		}
		return 0;
	}

	bpf_spin_lock(&v->lock);
	{
		int found = 0;
#pragma unroll
		for (int i = 0; i < MAX_IFACES; i++) {
			if (i < v->n_ifaces && !found && same_iface(&v->ifaces[i], me)) {
				found = 1;
				if (v->ifaces[i].dir != me->dir)
					v->ifaces[i].dir = DIR_BOTH;
			}
		}
		if (!found) {
			__u8 n = v->n_ifaces;
			if (n < MAX_IFACES) {
#pragma unroll
				for (int i = 1; i < MAX_IFACES; i++)
					if (i == n)
						v->ifaces[i] = *me;
				v->n_ifaces = n + 1;
			} else if (!(v->flags & FLOW_F_IFACES_OVERFLOW)) {
				v->flags |= FLOW_F_IFACES_OVERFLOW;
				lost_iface = 1;
			}
		}
	}
	bpf_spin_unlock(&v->lock);
	return lost_iface;
}

static __always_inline void send_overflow(struct __sk_buff *skb, const struct pkt *p,
					  const struct iface_obs *me, __u32 len, __u64 now)
{
	struct overflow_rec *r = bpf_ringbuf_reserve(&overflow, sizeof(*r), 0);
	if (!r) {
		count(CNT_OVERFLOW_LOST);
		return;
	}
	r->key = p->key;
	r->iface = *me;
	r->ts_ns = now;
	r->bytes = len;
	r->eth_type = p->eth_type;
	r->tcp_flags = p->tcp_flags;
	copy_macs(skb, r->src_mac, r->dst_mac);
	r->dscp = p->dscp;
	r->_pad[0] = r->_pad[1] = r->_pad[2] = 0;
	bpf_ringbuf_submit(r, 0);
	count(CNT_OVERFLOW_RECORDS);
}

/*
 * record adds the packet to the active map "cur". On a miss, the previous
 * generation "prev" (read by the agent, not written) is consulted so a packet
 * that was counted on its first interface before a flip is not counted again
 * on a later interface after it.
 */
static __always_inline void record(struct __sk_buff *skb, void *cur, void *prev,
				   const struct pkt *p, const struct iface_obs *me, __u32 len)
{
	__u64 now = bpf_ktime_get_coarse_ns();
	struct flow_value *v = bpf_map_lookup_elem(cur, &p->key);
	if (!v) {
		struct flow_value nv = {};
		struct flow_value *old = bpf_map_lookup_elem(prev, &p->key);

		nv.first_seen_ns = now;
		nv.last_seen_ns = now;
		nv.eth_type = p->eth_type;
		nv.dscp = p->dscp;
		copy_macs(skb, nv.src_mac, nv.dst_mac);
		nv.ifaces[0] = *me;
		nv.first_dir = me->dir;
		nv.n_ifaces = 1;
		if (old && !(same_iface(&old->ifaces[0], me) && old->first_dir == me->dir)) {
			/* Inherit the counting interface; this one is only listed. */
			nv.ifaces[0] = old->ifaces[0];
			nv.ifaces[0].dir = old->first_dir;
			nv.first_dir = old->first_dir;
			nv.ifaces[1] = *me;
			nv.n_ifaces = 2;
		} else {
			nv.bytes = len;
			nv.packets = 1;
			nv.tcp_flags = p->tcp_flags;
		}
		long err = bpf_map_update_elem(cur, &p->key, &nv, BPF_NOEXIST);
		if (err == 0) {
			count(CNT_NEW_FLOWS);
			return;
		}
		if (err != -17 /* EEXIST: another CPU inserted it first */) {
			send_overflow(skb, p, me, len, now);
			return;
		}
		v = bpf_map_lookup_elem(cur, &p->key);
		if (!v) { /* evicted in between: cannot happen, the active map is never deleted from */
			send_overflow(skb, p, me, len, now);
			return;
		}
	}
	if (apply(v, p, me, len, now))
		count(CNT_IFACES_OVERFLOW);
}

static __always_inline int handle(struct __sk_buff *skb, __u32 dir)
{
	if (sampling > 1 && bpf_get_prandom_u32() % sampling != 0)
		return TC_ACT_UNSPEC;

	struct pkt p; /* not zeroed: parse writes every field it returns PARSE_OK for */
	int r = parse(skb, &p);
	if (r == PARSE_TRUNCATED && skb->len > skb->data_end - skb->data) {
		/* Headers beyond the linear area (rare): pull them in and retry. */
		__u32 want = skb->len < 256 ? skb->len : 256;
		if (bpf_skb_pull_data(skb, want) == 0)
			r = parse(skb, &p);
	}
	if (r == PARSE_NON_IP) {
		count(CNT_NON_IP);
		return TC_ACT_UNSPEC;
	}
	if (r != PARSE_OK) {
		count(CNT_MALFORMED);
		return TC_ACT_UNSPEC;
	}

	struct iface_obs me = {
		.netns = netns_cookie,
		.ifindex = skb->ifindex,
		.dir = dir,
	};
	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&control, &zero);
	if (gen && (*gen & 1))
		record(skb, &flows_b, &flows_a, &p, &me, skb->len);
	else
		record(skb, &flows_a, &flows_b, &p, &me, skb->len);
	return TC_ACT_UNSPEC; /* TCX_NEXT: let the next program / the stack decide */
}

SEC("tc")
int flowlens_ingress(struct __sk_buff *skb)
{
	return handle(skb, DIR_INGRESS);
}

SEC("tc")
int flowlens_egress(struct __sk_buff *skb)
{
	return handle(skb, DIR_EGRESS);
}

#endif
