/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "drops": packets the kernel drops (kfree_skb with a drop reason),
 * counted on the flow of the dropped packet with the latest reason, and for
 * TCP the socket state and flags. Go side: internal/agent/feature/drops.
 */
#ifndef FLOWLENS_DROPS_H
#define FLOWLENS_DROPS_H

#include "enrich.h"
#include "frags.h"
#include "wire.h"
#include "tunnel.h"
#include "tcp.h" /* a dropped SYN's cause, kept with its connect */

/* Values of enum skb_drop_reason that are not drops; the agent reads them
 * from the running kernel's BTF (they differ between versions). */
volatile const __u32 reason_consumed = 1;
volatile const __u32 reason_not_specified = 2;
/* 1 when a flow filter rule keeps drops only (bpf/filter.h): the TC
 * programs keep its packets out of the flow maps, so the flows whose drops
 * it keeps cannot be told watched (bpf/enrich.h, watched): every drop is
 * recorded, as with --enrich-unwatched. */
volatile const __u32 drops_unwatched = 0;

/*
 * skb_key builds the key from the dropped packet's own headers, so it is the
 * key the TC program gave the same packet (a later IP fragment gets its
 * first fragment's ports from the same map, bpf/frags.h). Returns the TCP
 * flags through tcp_flags and the bytes from the network header to the end
 * of the L4 header through hdr (for GSO buffers). The packet bytes are no
 * BTF-typed memory: they are copied with bpf_probe_read_kernel, one call per
 * header (the skb's head buffer ends with skb_shared_info, so reading a
 * whole header's worth past a valid offset stays in the allocation).
 */
static __always_inline int skb_key(struct sk_buff *skb, int mode, struct flow_key *k, __u16 *tcp_flags, __u32 *hdr)
{
	__u16 nh = RD(mode, skb, network_header);
	if (nh == (__u16)~0U)
		return -1;
	unsigned char *head = RD(mode, skb, head);
	__u16 proto = bpf_ntohs(RD(mode, skb, protocol));
	unsigned char *l3 = head + nh;
	unsigned char *l4;
	__u8 h[40];
	if (proto == ETH_P_IP) {
		bpf_probe_read_kernel(h, 20, l3);
		if ((h[0] >> 4) != 4 || (h[0] & 0xf) < 5)
			return -1;
		v4mapped(k->src_ip, *(__u32 *)&h[12]);
		v4mapped(k->dst_ip, *(__u32 *)&h[16]);
		k->proto = h[9];
		if (bpf_ntohs(*(__u16 *)&h[6]) & 0x1fff) { /* a later fragment: no L4 header */
			frag_resolve(k, *(__u16 *)&h[4]);
			return 0;
		}
		l4 = l3 + (h[0] & 0xf) * 4;
	} else if (proto == ETH_P_IPV6) {
		bpf_probe_read_kernel(h, 40, l3);
		k->proto = h[6];
		__builtin_memcpy(k->src_ip, &h[8], 16);
		__builtin_memcpy(k->dst_ip, &h[24], 16);
		l4 = l3 + 40;
		if (k->proto == 44) { /* a fragment header right after the fixed header */
			bpf_probe_read_kernel(h, 8, l4);
			k->proto = h[0];
			l4 += 8;
			if (bpf_ntohs(*(__u16 *)&h[2]) & 0xFFF8) {
				frag_resolve(k, *(__u32 *)&h[4]);
				return 0;
			}
		}
		/* Other extension headers: trust the stack's transport header when set. */
		__u16 th = RD(mode, skb, transport_header);
		if (th != (__u16)~0U && head + th > l4)
			l4 = head + th;
	} else {
		return -1;
	}
	*hdr = l4 - l3;
	switch (k->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case 132: /* SCTP */
		bpf_probe_read_kernel(h, 14, l4); /* ports; TCP flags at 13 */
		k->src_port = bpf_ntohs(*(__u16 *)&h[0]);
		k->dst_port = bpf_ntohs(*(__u16 *)&h[2]);
		if (k->proto == IPPROTO_TCP) {
			*tcp_flags = h[13];
			*hdr += (h[12] >> 4) * 4;
		} else if (k->proto == IPPROTO_UDP) {
			*hdr += 8;
		}
		break;
	case IPPROTO_ICMP:
	case 58: /* ICMPv6 */
		bpf_probe_read_kernel(h, 2, l4);
		k->icmp_type = h[0];
		k->icmp_code = h[1];
		break;
	}
	/* A tunnel packet dropped before decapsulation: its inner flow, as
	 * the TC programs key it (bpf/tunnel.h). */
	tunnel_kernel_key(l4, k, tcp_flags);
	return 0;
}

/*
 * drop_wire sets the wire packets and bytes of a dropped skb, by the TC
 * programs' rule (gso_wire, bpf/wire.h): frame bytes from the MAC header when the
 * packet has one (received packets), else from the network header; a GSO
 * buffer counts as its segments, each with its own headers; a VLAN tag held
 * in the skb counts in every segment.
 */
static __always_inline void drop_wire(struct sk_buff *skb, int mode, __u32 hdr, __u32 *bytes, __u32 *packets)
{
	__u32 len = RD(mode, skb, len);
	unsigned char *head = RD(mode, skb, head);
	__u16 mh = RD(mode, skb, mac_header);
	__u16 nh = RD(mode, skb, network_header);
	if (mh != (__u16)~0U) {
		unsigned char *data = RD(mode, skb, data);
		long l2 = data - (head + mh);
		if (l2 > 0 && l2 < 256)
			len += l2;
		if (nh > mh && nh - mh < 256)
			hdr += nh - mh;
	}
	struct skb_shared_info *sh = (void *)(head + RD(mode, skb, end));
	__u16 gso_size = BPF_CORE_READ(sh, gso_size);
	__u32 segs = gso_size ? BPF_CORE_READ(sh, gso_segs) : 1; /* not GSO: one packet */
	gso_wire(len, gso_size, segs, hdr, RD(mode, skb, vlan_all) ? 4 : 0, bytes, packets);
}

static __always_inline int record_drop(struct sk_buff *skb, int mode, __u32 reason)
{
	if (reason == reason_consumed || reason == reason_not_specified || reason == 0)
		return 0;
	TCP_KEY key = {}; /* 8-aligned: tcp_syn_dropped (bpf/tcp.h) */
	__u16 flags = 0;
	__u32 hdr = 0, len, segs;
	if (skb_key(skb, mode, &key, &flags, &hdr))
		return 0;
	/* The zone the TC programs give the packet (bpf/zone.h): its
	 * device's, after frag_resolve (which writes the key's tail). */
	/* Its pointer fields through an untrusted copy (bpf/core.h). */
	struct sk_buff *u = mode == BTF_PTR ? UNTRUSTED(skb, struct sk_buff) : skb;
	struct net_device *dev = RD(mode, u, dev);
	if (dev) {
		struct net *net = RD(mode, dev, nd_net.net);
		if (net)
			key.zone = zone_of(RD(mode, dev, ifindex), RD(mode, net, net_cookie));
	}
	if (!drops_unwatched && !watched(&key, mode))
		return 0;
	drop_wire(skb, mode, hdr, &len, &segs);
	struct enrich_value *v = enrich_entry(&key, generation());
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->drop_packets, segs);
	__sync_fetch_and_add(&v->drop_bytes, len);
	v->drop_cause = reason;
	if (key.proto == IPPROTO_TCP) {
		struct sock *sk = RD(mode, u, sk);
		v->drop_tcp_flags = flags;
		v->drop_tcp_state = sk ? RD(mode, sk, __sk_common.skc_state) : 0;
		if ((flags & 0x12) == 0x02) /* a SYN: feature "tcp" keeps its drop with the connect */
			tcp_syn_dropped(&key, v);
	}
	return 0;
}

SEC("tp_btf/kfree_skb")
int drop_kfree_skb(unsigned long long *ctx)
{
	return record_drop((struct sk_buff *)ctx[0], BTF_PTR, (__u32)ctx[2]);
}

/*
 * Fallback where tp_btf is missing: the classic tracepoint (needs tracefs
 * mounted). Its record layout changed between kernels (rx_sk was added
 * before protocol), so fields are read with CO-RE by name.
 */
enum skb_drop_reason___fl { SKB_DROP_REASON___FL_UNUSED }; /* CO-RE matches the kernel's enum by name */

struct trace_event_raw_kfree_skb {
	void *skbaddr;
	enum skb_drop_reason___fl reason;
} __attribute__((preserve_access_index));

SEC("tracepoint/skb/kfree_skb")
int drop_tracepoint(struct trace_event_raw_kfree_skb *args)
{
	return record_drop((struct sk_buff *)BPF_CORE_READ(args, skbaddr), RAW_PTR, BPF_CORE_READ(args, reason));
}

#endif
