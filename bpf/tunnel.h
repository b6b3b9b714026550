/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "flows", overlays: a pod's packet that leaves the node inside a
 * tunnel is one packet, counted once, in its inner flow. At a hook that
 * sees it encapsulated (the uplink's egress after encapsulation, its
 * ingress before decapsulation) the TC programs read through the outer
 * headers and key the packet on its inner 7-tuple, so the uplink is one
 * more interface the inner flow lists, not a node-to-node flow of its own:
 *
 *   VXLAN   UDP to 4789 (IANA) or 8472 (Linux's default, flannel), I flag
 *           set, an inner Ethernet frame
 *   Geneve  UDP to 6081, version 0, an inner Ethernet frame (0x6558) or
 *           an inner IP packet (0x0800, 0x86DD), past its options
 *   IP-in-IP  IPv4 protocol 4 (IPv4 inside) or 41 (IPv6 inside, sit);
 *           the same under an IPv6 header with no extension header
 *
 * A tunnel packet whose inner packet does not parse as IP (ARP inside
 * VXLAN, a truncated inner header, a Geneve payload of another protocol)
 * keeps its outer key: it is counted there, the only place it is counted.
 * An outer fragment is not read through (no inner header in later ones).
 *
 * Order (docs/design/counting.md, Overlays): an encapsulated packet's egress
 * is never certainly first (the inner packet crossed the tunnel device, and
 * maybe a pod's veth, before), and a decapsulating device's ingress is not
 * either (bpf/order.h: the uplink saw it before); the uplink's ingress of
 * an encapsulated packet stays certainly first, as a NIC's ingress is.
 *
 * With overlay_on (set by the agent whenever it reads the enrichment maps,
 * i.e. some feature is on), the inner flow's enrichment entry
 * gets the outer endpoints, the tunnel type and VNI (enrich_value.tun_*),
 * written on a hook's first packet of the flow in a generation (insert and
 * slow, bpf/flows.h), never on the fast path. With overlay_outer_on
 * (--overlay-outer-flows) the packets read through are also counted by
 * outer 7-tuple in tunnel_outer_a/_b (below), for records marked
 * overlay_outer that sums skip (docs/design/counting.md, Overlays).
 *
 * Cost: one protocol test per packet (and a port test for UDP); only
 * tunnel packets run flowlens_tunnel_inner.
 */
#ifndef FLOWLENS_TUNNEL_H
#define FLOWLENS_TUNNEL_H

#include "enrich.h"
#include "parse.h"
#include "wire.h"

volatile const __u32 overlay_on = 0; /* outer endpoints on the inner flow's enrichment entry */
/* --overlay-outer-flows: the node-to-node tunnel flows, counted apart
 * (tunnel_outer_a/_b below), for records marked overlay_outer. */
volatile const __u32 overlay_outer_on = 0;

/*
 * The tunnel flows (overlay_outer_on): the packets read through, by outer
 * 7-tuple, double-buffered like flows_a/_b and switched by the same
 * generation (control[CTL_GEN]); the agent reads and empties the ended one
 * at each eviction into records marked overlay_outer, which sums skip: the
 * same packets are counted in their inner flows. Kept apart from the flow
 * maps so that an outer packet is never a flow of the counting rule (a
 * second record() for the outer key does not fit the TC programs' stack
 * either). An outer flow counts at the first interface and direction that
 * saw it in a generation (obs): the uplink, where the outer packets exist;
 * another watched interface carrying the same outer packets (a bond's
 * slave) is not added. max_entries is set at load: 1 when the option is
 * off (the maps cost nothing), --cache-max-flows when on. A packet that
 * finds the map full is not in an outer record (it stays in its inner
 * flow, the one that sums count).
 */
struct tunnel_outer_value {
	__u64 packets;
	__u64 bytes;
	__u64 first_seen; /* jiffies */
	__u64 last_seen;
	struct iface_obs obs; /* the observation that counts the outer flow */
	__u32 vni;
	__u8 type; /* enum tunnel_type */
	__u8 _pad[3];
};

#define DEFINE_OUTER_MAP(name)                                  \
	struct {                                                \
		__uint(type, BPF_MAP_TYPE_HASH);                \
		__type(key, struct flow_key);                   \
		__type(value, struct tunnel_outer_value);       \
		__uint(max_entries, 1);                         \
	} name SEC(".maps")

DEFINE_OUTER_MAP(tunnel_outer_a);
DEFINE_OUTER_MAP(tunnel_outer_b);

/* One all-zero tunnel flow value (never written): what a new entry starts as. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tunnel_outer_value);
	__uint(max_entries, 1);
} tunnel_outer_zero SEC(".maps");

#define VXLAN_PORT 4789
#define VXLAN_LINUX_PORT 8472
#define GENEVE_PORT 6081
#define ETH_P_TEB_ 0x6558 /* transparent Ethernet bridging: Geneve's inner Ethernet */
#ifndef IPPROTO_IPIP
#define IPPROTO_IPIP 4
#endif
#ifndef IPPROTO_IPV6
#define IPPROTO_IPV6 41
#endif
#define TUNNEL_MAX_OFF 384 /* inner headers further in are not read */

/*
 * The tunnel a packet was read out of, in one word (struct wpkt's tun, so
 * the TC programs' stack, 512 bytes for all frames, grows by 8 bytes, not by
 * the outer addresses): the outer IP header's offset from skb->data, the
 * VNI, the type and the outer IP version. tunnel_note reads the outer
 * addresses from the packet again, on the slow path only. 0: no tunnel.
 */
#define TUN_WORD(off, vni, type, v6) \
	((__u64)(off) | ((__u64)(vni) << 16) | ((__u64)(type) << 40) | ((__u64)(v6) << 48))
#define TUN_OFF(w) ((__u32)((w) & 0xffff))
#define TUN_VNI(w) ((__u32)(((w) >> 16) & 0xffffff))
#define TUN_TYPE(w) ((__u8)((w) >> 40))
#define TUN_V6(w) ((__u32)((w) >> 48) & 1)

/* tunnel_candidate: could p be encapsulated (one test for most packets)? */
static __always_inline int tunnel_candidate(const struct pkt *p)
{
	__u8 proto = p->key.proto;
	if (proto == IPPROTO_UDP) {
		__u16 d = p->key.dst_port;
		return p->frag == FRAG_NONE && (d == VXLAN_PORT || d == VXLAN_LINUX_PORT || d == GENEVE_PORT);
	}
	return (proto == IPPROTO_IPIP || proto == IPPROTO_IPV6) && p->frag == FRAG_NONE;
}

/*
 * flowlens_tunnel_outer counts a packet read through (tunnel word tun) in
 * the outer flow k of the active generation, when me is the outer flow's
 * counting observation there (the first that saw it). wire: the outer
 * frames, GSO segments each (the inner protocol proto: a tunnelled GSO
 * buffer's segments repeat the inner headers). Global: verified once, run
 * only with overlay_outer_on, on tunnel packets.
 */
__noinline int flowlens_tunnel_outer(struct __sk_buff *skb, const struct flow_key *k, const struct iface_obs *me,
				     __u64 tun, __u32 proto)
{
	if (!k || !me)
		return 0;
	__u32 slot = CTL_GEN;
	__u32 *gen = bpf_map_lookup_elem(&control, &slot);
	void *m = gen && (*gen & 1) ? (void *)&tunnel_outer_b : (void *)&tunnel_outer_a;
	__u32 bytes, packets;
	wire(skb, proto, &bytes, &packets);
	__u64 now = bpf_jiffies64();
	struct tunnel_outer_value *v = bpf_map_lookup_elem(m, k);
	if (!v) {
		/* Inserted from an all-zero value, not one built on the stack:
		 * the TC programs' 512 bytes of stack are all but used by the
		 * frames of handle and tunnel_inner. */
		__u32 z = 0;
		struct tunnel_outer_value *zero = bpf_map_lookup_elem(&tunnel_outer_zero, &z);
		if (!zero)
			return 0;
		long err = bpf_map_update_elem(m, k, zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(m, k);
		if (!v)
			return 0;
		if (err == 0) {
			v->first_seen = now;
			v->vni = TUN_VNI(tun);
			v->type = TUN_TYPE(tun);
			v->obs = *me;
		}
	}
	/* Another interface carrying the same outer packets is not added; an
	 * entry another CPU is still filling in (no ifindex yet) is. */
	if (v->obs.ifindex && (v->obs.ifindex != me->ifindex || v->obs.netns != me->netns || v->obs.dir != me->dir))
		return 0;
	__sync_fetch_and_add(&v->packets, packets);
	__sync_fetch_and_add(&v->bytes, bytes);
	v->last_seen = now;
	return 1;
}

/*
 * tunnel_inner reads the inner packet of a tunnel candidate p. On success
 * p becomes the inner packet (key, flags, DSCP, ether type, payload offset,
 * fragment state) and it returns the tunnel's word (TUN_WORD); otherwise p
 * is unchanged (the packet keeps its outer key) and it returns 0.
 *
 * A global function, verified once on its own: the verifier sees one
 * state come back (p's bytes unknown), not one per inner protocol and
 * version, which multiplied the states of everything after it (measured:
 * a static function took the TC program from 47k to 408k verified
 * instructions). Only tunnel packets come here.
 */
__noinline __u64 flowlens_tunnel_inner(struct __sk_buff *skb, struct pkt *p, int l3, const struct iface_obs *me)
{
	if (!p)
		return 0;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	/* The outer IP header: after the Ethernet header and its tags. */
	__u32 nh = 0;
	if (!l3) {
		nh = sizeof(struct ethhdr);
		if (data + nh > data_end)
			return 0;
		__u16 pr = LOAD16(data + 12);
#pragma unroll
		for (int i = 0; i < 2; i++) {
			if (pr != bpf_htons(ETH_P_8021Q_) && pr != bpf_htons(ETH_P_8021AD_))
				break;
			__u16 *vlan = data + nh;
			if ((void *)(vlan + 2) > data_end)
				return 0;
			pr = vlan[1];
			nh += 4;
		}
	}
	int v6 = p->eth_type == ETH_P_IPV6;
	__u32 off, vni = 0, type;
	__u16 inner; /* the inner ether type, network order; 0: an inner Ethernet frame */
	if (p->key.proto == IPPROTO_UDP) {
		off = p->payload; /* the UDP payload: the tunnel header */
		if (off > TUNNEL_MAX_OFF)
			return 0;
		__u8 *h = data + off;
		if ((void *)(h + 8) > data_end)
			return 0;
		vni = ((__u32)h[4] << 16) | ((__u32)h[5] << 8) | h[6];
		if (p->key.dst_port == GENEVE_PORT) {
			if (h[0] >> 6) /* version 0 only */
				return 0;
			__u16 pt = LOAD16(h + 2);
			if (pt == bpf_htons(ETH_P_TEB_))
				inner = 0;
			else if (pt == bpf_htons(ETH_P_IP) || pt == bpf_htons(ETH_P_IPV6))
				inner = pt;
			else
				return 0;
			off += 8 + (h[0] & 0x3f) * 4;
			type = TUN_GENEVE;
		} else {
			if (!(h[0] & 0x08)) /* the I flag: a VNI is present */
				return 0;
			off += 8;
			inner = 0;
			type = TUN_VXLAN;
		}
	} else {
		/* IP-in-IP: the inner IP header follows the outer one. */
		__u8 *ip = data + nh;
		if ((void *)(ip + 8) > data_end)
			return 0;
		if (!v6) {
			off = nh + (ip[0] & 0xf) * 4;
		} else {
			if (ip[6] != p->key.proto) /* an IPv6 outer header with extension headers */
				return 0;
			off = nh + sizeof(struct ipv6hdr);
		}
		inner = p->key.proto == IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
		type = TUN_IPIP;
	}
	if (!inner) { /* an inner Ethernet frame (no VLAN tag) */
		if (off > TUNNEL_MAX_OFF)
			return 0;
		__u8 *eth = data + off;
		if ((void *)(eth + sizeof(struct ethhdr)) > data_end)
			return 0;
		inner = LOAD16(eth + 12);
		off += sizeof(struct ethhdr);
	}
	if (off > TUNNEL_MAX_OFF)
		return 0;
	/* One offset the verifier does not know, from skb->data loaded again
	 * (as parse does): the inner headers are verified once, not once per
	 * way through the outer ones. */
	__u64 o = ((data + off) - data) & 0x1ff;
	barrier();
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	struct pkt q;
	q.tcp_flags = 0;
	q.frag = FRAG_NONE;
	q.payload = 0;
	q.eth_type = bpf_ntohs(inner);
	int r;
	if (inner == bpf_htons(ETH_P_IP))
		r = parse_ipv4(data, data + o, data_end, &q);
	else if (inner == bpf_htons(ETH_P_IPV6))
		r = parse_ipv6(skb, data, data + o, data_end, &q);
	else
		return 0;
	if (r != PARSE_OK)
		return 0;
	__u64 tun = TUN_WORD(nh, vni, type, v6);
	if (overlay_outer_on)
		flowlens_tunnel_outer(skb, &p->key, me, tun, q.key.proto);
	*p = q;
	return tun;
}

/*
 * tunnel_note writes the tunnel tun (TUN_WORD) of the packet skb into the
 * enrichment entry of its inner flow k (generation gen), the last writer's
 * tunnel winning. Called on a hook's first packet of the flow in a
 * generation only (insert, slow), so a hash lookup there is no per-packet
 * cost. Global, like flowlens_tunnel_inner: verified once.
 */
__noinline int flowlens_tunnel_note(struct __sk_buff *skb, const struct flow_key *k, __u64 tun, __u32 gen)
{
	if (!k)
		return 0;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 nh = TUN_OFF(tun);
	if (nh > 64)
		return 0;
	__u8 src[16], dst[16];
	if (TUN_V6(tun)) {
		struct ipv6hdr *ip6 = data + nh;
		if ((void *)(ip6 + 1) > data_end)
			return 0;
		__builtin_memcpy(src, &ip6->saddr, 16);
		__builtin_memcpy(dst, &ip6->daddr, 16);
	} else {
		struct iphdr *ip = data + nh;
		if ((void *)(ip + 1) > data_end)
			return 0;
		v4mapped(src, ip->saddr);
		v4mapped(dst, ip->daddr);
	}
	struct enrich_value *e = enrich_entry(k, gen);
	if (!e)
		return 0;
	__builtin_memcpy(e->tun_src, src, 16);
	__builtin_memcpy(e->tun_dst, dst, 16);
	e->tun_vni = TUN_VNI(tun);
	e->tun_type = TUN_TYPE(tun);
	return 1;
}

/*
 * tunnel_kernel_key is the drop hook's read-through (bpf/drops.h, skb_key):
 * k is the outer key of a dropped packet whose L4 header (for IP-in-IP:
 * inner IP header) is at l4 in kernel memory, read with
 * bpf_probe_read_kernel. When k is a tunnel packet whose inner packet is
 * IP, k becomes the inner key, as the TC programs key it, tcp_flags the
 * inner TCP flags, and it returns 1; otherwise k is unchanged (0). An inner
 * later fragment or an inner IPv6 extension header keeps the outer key.
 */
static __always_inline int tunnel_kernel_key(unsigned char *l4, struct flow_key *k, __u16 *tcp_flags)
{
	__u8 h[40];
	unsigned char *in;
	__u16 et; /* the inner ether type, network order; 0: an inner Ethernet frame */
	if (k->proto == IPPROTO_UDP) {
		__u16 d = k->dst_port;
		if (d != VXLAN_PORT && d != VXLAN_LINUX_PORT && d != GENEVE_PORT)
			return 0;
		if (bpf_probe_read_kernel(h, 8, l4 + 8))
			return 0;
		in = l4 + 16;
		if (d == GENEVE_PORT) {
			if (h[0] >> 6)
				return 0;
			et = *(__u16 *)&h[2];
			if (et == bpf_htons(ETH_P_TEB_))
				et = 0;
			else if (et != bpf_htons(ETH_P_IP) && et != bpf_htons(ETH_P_IPV6))
				return 0;
			in += (h[0] & 0x3f) * 4;
		} else {
			if (!(h[0] & 0x08))
				return 0;
			et = 0;
		}
		if (!et) {
			if (bpf_probe_read_kernel(h, 14, in))
				return 0;
			et = *(__u16 *)&h[12];
			in += 14;
		}
	} else if (k->proto == IPPROTO_IPIP) {
		in = l4;
		et = bpf_htons(ETH_P_IP);
	} else if (k->proto == IPPROTO_IPV6) {
		in = l4;
		et = bpf_htons(ETH_P_IPV6);
	} else {
		return 0;
	}
	struct flow_key n = {};
	unsigned char *il4;
	if (et == bpf_htons(ETH_P_IP)) {
		if (bpf_probe_read_kernel(h, 20, in) || (h[0] >> 4) != 4 || (h[0] & 0xf) < 5 ||
		    (bpf_ntohs(*(__u16 *)&h[6]) & 0x1fff))
			return 0;
		v4mapped(n.src_ip, *(__u32 *)&h[12]);
		v4mapped(n.dst_ip, *(__u32 *)&h[16]);
		n.proto = h[9];
		il4 = in + (h[0] & 0xf) * 4;
	} else if (et == bpf_htons(ETH_P_IPV6)) {
		if (bpf_probe_read_kernel(h, 40, in) || (h[0] >> 4) != 6)
			return 0;
		n.proto = h[6];
		__builtin_memcpy(n.src_ip, &h[8], 16);
		__builtin_memcpy(n.dst_ip, &h[24], 16);
		il4 = in + 40;
	} else {
		return 0;
	}
	__u16 f = 0;
	switch (n.proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
		if (bpf_probe_read_kernel(h, 14, il4))
			return 0;
		n.src_port = bpf_ntohs(*(__u16 *)&h[0]);
		n.dst_port = bpf_ntohs(*(__u16 *)&h[2]);
		if (n.proto == IPPROTO_TCP)
			f = h[13];
		break;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if (bpf_probe_read_kernel(h, 2, il4))
			return 0;
		n.icmp_type = h[0];
		n.icmp_code = h[1];
		break;
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_FRAGMENT:
		return 0;
	}
	*k = n;
	*tcp_flags = f;
	return 1;
}

#endif
