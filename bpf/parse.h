/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Packet parsing for the TC programs: Ethernet (+ up to two 802.1Q/802.1ad
 * tags) or, on devices without a link-layer header (tun, WireGuard, ipip,
 * gre: parse_l3), straight from the IP header; IPv4, IPv6 (+ hop-by-hop,
 * routing, fragment, destination options), TCP, UDP, SCTP, ICMP, ICMPv6.
 * Direct packet access only: every read is bounds-checked against data_end,
 * so a truncated header is detected, never read past.
 */
#ifndef FLOWLENS_PARSE_H
#define FLOWLENS_PARSE_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "types.h"

#ifndef IPPROTO_SCTP
#define IPPROTO_SCTP 132
#endif
#define ETH_P_8021AD_ 0x88A8
#define ETH_P_8021Q_ 0x8100
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF
#define MAX_IPV6_EXT 6
#define PARSE_L4_MAX_OFF 0xfff /* an IPv6 transport header further in is not read */

/*
 * The parser's exits (docs/design/counting.md, "Packets the parser cannot
 * read"). A packet whose addresses were read ends in a flow even when a
 * later header is not readable: parse then returns TRUNCATED or MALFORMED
 * with pkt.unread set (FLOW_F_L4_UNREAD, FLOW_F_EXT_UNREAD) and the key
 * whole (addresses, the last protocol read, ports 0). With pkt.unread 0 the
 * addresses were not read either, and the packet ends in a counter:
 *   Ethernet or VLAN header, IPv4 or IPv6 fixed header truncated: TRUNCATED,
 *     CNT_TRUNCATED;
 *   IP version other than the ether type's, IPv4 IHL < 5: MALFORMED,
 *     CNT_MALFORMED;
 *   not IPv4/IPv6: NON_IP, CNT_NON_IP.
 * With the addresses read:
 *   IPv4 options past the packet, an IPv6 extension header truncated or
 *     past the parse window, a seventh IPv6 extension header: proto the
 *     header's protocol (IPv4) or the next header not read (IPv6),
 *     FLOW_F_EXT_UNREAD;
 *   the TCP, UDP, SCTP or ICMP header truncated (a tiny first fragment, a
 *     cut packet) or a TCP data offset < 5: FLOW_F_L4_UNREAD.
 */
enum parse_result {
	PARSE_OK = 0,
	PARSE_NON_IP = 1,
	PARSE_TRUNCATED = 2, /* a header runs past the linear data */
	PARSE_MALFORMED = 3, /* a header is invalid */
};

/*
 * What one packet contributes: its key and per-packet metadata. parse writes
 * every field on every PARSE_OK path, so the struct is not zeroed first
 * (saves zeroing ~64 bytes of stack per packet).
 */
struct pkt {
	/* 8-byte aligned: the key is built with 8- and 4-byte stores. */
	struct flow_key key __attribute__((aligned(8)));
	/* No MACs: copy_macs reads them only when a flow is created or
	 * overflows (saved 24 byte loads/stores per packet). */
	__u16 eth_type;
	__u16 tcp_flags;
	__u8 dscp;
	__u8 frag;    /* enum frag_kind */
	__u16 payload; /* TCP, UDP: the L4 payload's offset from skb->data; 0: none */
	__u32 frag_id; /* IPv4 ID / IPv6 fragment identification, when frag */
	/* FLOW_F_L4_UNREAD or FLOW_F_EXT_UNREAD: parse failed after reading the
	 * addresses, the key is whole (ports 0); 0 on every other exit. */
	__u8 unread;
	__u8 dns;      /* feature "dns": written and read by handle (bpf/flows.h) only */
	__u16 l4;      /* TCP: the header's offset from skb->data (feature "tcp") */
};

enum frag_kind {
	FRAG_NONE = 0,
	FRAG_FIRST = 1, /* offset 0, more fragments: has the L4 header */
	FRAG_LATER = 2, /* offset > 0: no L4 header, ports from frags (bpf/frags.h) */
};

#define NEED(p, n) if ((void *)(p) + (n) > data_end) return PARSE_TRUNCATED

/*
 * Packet loads wider than the header's declared alignment (ethhdr is packed,
 * so clang reads its fields byte by byte; in6_addr is 4-byte aligned).
 * Misaligned packet access is allowed by the verifier and cheap on x86-64 and
 * arm64 (both have efficient unaligned access).
 */
#define LOAD16(p) (*(const __u16 *)(p))
#define LOAD64(p) (*(const __u64 *)(p))

/* set_l4 writes the key's last 8 bytes: ports and ICMP type/code zero
 * (parse_l4 fills them), proto, zone zero (handle sets it, bpf/zone.h). It is the only zeroing of the key:
 * struct pkt is not zeroed as a whole. */
static __always_inline void set_l4(struct pkt *p, __u8 proto)
{
	__builtin_memset(&p->key.src_port, 0, 8); /* one 8-byte store */
	p->key.proto = proto;
}

static __always_inline __u16 tcp_flags_of(const struct tcphdr *th)
{
	__u16 f = ((const __u8 *)th)[13];
	if ((f & 0x12) == 0x12) /* SYN|ACK */
		f |= TCP_SYN_ACK;
	if ((f & 0x11) == 0x11) /* FIN|ACK */
		f |= TCP_FIN_ACK;
	if ((f & 0x14) == 0x14) /* RST|ACK */
		f |= TCP_RST_ACK;
	if (!th->window && !(f & 0x06)) /* neither SYN nor RST (a RST's window means nothing) */
		f |= TCP_ZERO_WIN;
	return f;
}

/* read_l4 fills ports / ICMP type+code (set_l4 zeroed them). */
static __always_inline int read_l4(void *data, void *l4, void *data_end, __u8 proto, struct pkt *p)
{
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;
		NEED(th, sizeof(*th));
		if (th->doff < 5)
			return PARSE_MALFORMED;
		p->key.src_port = bpf_ntohs(th->source);
		p->key.dst_port = bpf_ntohs(th->dest);
		p->tcp_flags = tcp_flags_of(th);
		p->l4 = (void *)th - data;
		p->payload = (void *)th + th->doff * 4 - data;
		return PARSE_OK;
	}
	case IPPROTO_UDP:
	case IPPROTO_SCTP: { /* both start with 16-bit source and destination ports */
		__u16 *ports = l4;
		NEED(ports, proto == IPPROTO_UDP ? 8 : 12);
		p->key.src_port = bpf_ntohs(ports[0]);
		p->key.dst_port = bpf_ntohs(ports[1]);
		if (proto == IPPROTO_UDP)
			p->payload = (void *)ports + 8 - data;
		return PARSE_OK;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		__u8 *ic = l4;
		NEED(ic, 4);
		p->key.icmp_type = ic[0];
		p->key.icmp_code = ic[1];
		return PARSE_OK;
	}
	}
	return PARSE_OK; /* other protocols: 3-tuple flows */
}

/* parse_l4 reads the transport header; one it cannot read leaves the ports
 * 0 and flags the packet (it still counts in its flow). */
static __always_inline int parse_l4(void *data, void *l4, void *data_end, __u8 proto, struct pkt *p)
{
	int r = read_l4(data, l4, data_end, proto, p);
	if (r != PARSE_OK)
		p->unread = FLOW_F_L4_UNREAD;
	return r;
}

static __always_inline int parse_ipv4(void *data, void *nh, void *data_end, struct pkt *p)
{
	struct iphdr *ip = nh;
	NEED(ip, sizeof(*ip));
	if (ip->version != 4 || ip->ihl < 5)
		return PARSE_MALFORMED;
	/* IPv4-mapped IPv6: ::ffff:a.b.c.d, in three stores per address. */
	__u32 *src = (__u32 *)p->key.src_ip, *dst = (__u32 *)p->key.dst_ip;
	*(__u64 *)src = 0;
	src[2] = bpf_htonl(0xffff);
	src[3] = ip->saddr;
	*(__u64 *)dst = 0;
	dst[2] = bpf_htonl(0xffff);
	dst[3] = ip->daddr;
	set_l4(p, ip->protocol);
	p->dscp = ip->tos >> 2;
	__u32 hlen = ip->ihl * 4;
	if (nh + hlen > data_end) { /* options past the packet */
		p->unread = FLOW_F_EXT_UNREAD;
		return PARSE_TRUNCATED;
	}
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)) {
		p->frag_id = ip->id;
		if (ip->frag_off & bpf_htons(IP_OFFSET)) {
			p->frag = FRAG_LATER;
			return PARSE_OK; /* no L4 header */
		}
		p->frag = FRAG_FIRST;
	}
	return parse_l4(data, nh + hlen, data_end, ip->protocol, p);
}

static __always_inline int parse_ipv6(struct __sk_buff *skb, void *data, void *nh, void *data_end, struct pkt *p)
{
	struct ipv6hdr *ip6 = nh;
	NEED(ip6, sizeof(*ip6));
	if (ip6->version != 6)
		return PARSE_MALFORMED;
	/* 8-byte copies: memcpy makes 4-byte ones (twice the loads and stores). */
	__u64 *key = (__u64 *)&p->key;
	key[0] = LOAD64(&ip6->saddr);
	key[1] = LOAD64((void *)&ip6->saddr + 8);
	key[2] = LOAD64(&ip6->daddr);
	key[3] = LOAD64((void *)&ip6->daddr + 8);
	p->dscp = ((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2;

	__u8 nexthdr = ip6->nexthdr;
	void *cur = nh + sizeof(*ip6);
	/* Here, not on each return below: set_l4 at both returns cost the verifier
	 * 1200 more processed instructions (less state pruning). */
	set_l4(p, 0); /* proto is set below, once the extension headers are skipped */
#pragma unroll
	for (int i = 0; i < MAX_IPV6_EXT; i++) {
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS: {
			__u8 *ext = cur;
			if (cur + 8 > data_end)
				goto ext_unread;
			nexthdr = ext[0];
			cur += (ext[1] + 1) * 8;
			continue;
		}
		case IPPROTO_FRAGMENT: {
			__u8 *ext = cur;
			if (cur + 8 > data_end)
				goto ext_unread;
			nexthdr = ext[0];
			cur += 8;
			p->frag_id = *(__u32 *)(ext + 4);
			if (bpf_ntohs(*(__u16 *)(ext + 2)) & 0xFFF8) {
				p->key.proto = nexthdr;
				p->frag = FRAG_LATER;
				return PARSE_OK; /* no L4 header */
			}
			/* Offset 0: the first fragment if M is set (an atomic
			 * fragment, M clear, is a whole datagram). */
			if (ext[3] & 1)
				p->frag = FRAG_FIRST;
			continue;
		}
		}
		break;
	}
	switch (nexthdr) { /* still an extension header after MAX_IPV6_EXT */
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_FRAGMENT:
		p->key.proto = nexthdr;
		p->unread = FLOW_F_EXT_UNREAD;
		return PARSE_MALFORMED;
	}
	p->key.proto = nexthdr;
	/* The transport header at an offset the verifier does not know (a
	 * pointer difference), from skb->data loaded again, as parse does for
	 * the IP header: read_l4 is verified once, not once per way through
	 * the extension headers (docs/benchmarks.md §38). */
	__u64 l4off = cur - data;
	if (l4off > PARSE_L4_MAX_OFF)
		goto ext_unread;
	barrier();
	data = (void *)(long)skb->data;
	return parse_l4(data, data + l4off, data_end, nexthdr, p);
ext_unread: /* an extension header truncated or past the parse window */
	p->key.proto = nexthdr;
	p->unread = FLOW_F_EXT_UNREAD;
	return PARSE_TRUNCATED;
}

/*
 * copy_macs copies the frame's MACs, read again from the packet: only a new
 * flow or an overflow record needs them. (A packet pointer kept in struct pkt
 * instead cost the verifier 5000 more processed instructions: its range
 * differs between parse paths, which defeats state pruning.)
 */
static __always_inline void copy_macs(struct __sk_buff *skb, __u8 *src, __u8 *dst)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end) /* parse read it: for the verifier only */
		return;
	__builtin_memcpy(src, eth->h_source, 6);
	__builtin_memcpy(dst, eth->h_dest, 6);
}

/*
 * vlan_tags skips the VLAN tags (up to two: QinQ) of the Ethernet frame at
 * data, whose header is there: it returns where the network header starts
 * with its ether type in *proto (network order), or NULL when a tag is
 * truncated. Compared in network order: no byte swap per tag.
 */
static __always_inline void *vlan_tags(void *data, void *data_end, __u16 *proto)
{
	__u16 pr = LOAD16(data + 12); /* eth->h_proto */
	void *nh = data + sizeof(struct ethhdr);
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (pr != bpf_htons(ETH_P_8021Q_) && pr != bpf_htons(ETH_P_8021AD_))
			break;
		__u16 *vlan = nh; /* TCI, then the encapsulated ether type */
		if ((void *)(vlan + 2) > data_end)
			return NULL;
		pr = vlan[1];
		nh += 4;
	}
	*proto = pr;
	return nh;
}

/* parse reads the frame at skb->data into p. */
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	p->unread = 0; /* before any exit: handle reads it on every failure */
	NEED(eth, sizeof(*eth));
	/* Non-TCP packets: no flags. Set here, before any branch: set in
	 * parse_ipv4 it cost the verifier 1300 more processed instructions. */
	p->tcp_flags = 0;
	p->frag = FRAG_NONE;
	p->payload = 0;

	__u16 proto;
	void *nh = vlan_tags(data, data_end, &proto);
	if (!nh)
		return PARSE_TRUNCATED;
	/* The IP header at an offset the verifier does not know (a pointer
	 * difference, masked: 14, 18 or 22 keep their bits), from skb->data
	 * loaded again (barrier: not the register whose checked range differs
	 * by tag count): the IP headers are verified once, not once per number
	 * of tags, and so is everything after them (docs/benchmarks.md §27). */
	__u64 off = (nh - data) & 0x1e;
	barrier();
	data = (void *)(long)skb->data;
	nh = data + off;
	p->eth_type = bpf_ntohs(proto);
	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(data, nh, data_end, p);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(skb, data, nh, data_end, p);
	return PARSE_NON_IP;
}

/*
 * parse_l3 reads a packet of a device without a link-layer header: skb->data
 * is the IP header, and skb->protocol (set by the driver or the stack) says
 * which IP version. No MACs.
 */
static __always_inline int parse_l3(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u16 proto = skb->protocol; /* network order */
	p->tcp_flags = 0;
	p->frag = FRAG_NONE;
	p->payload = 0;
	p->unread = 0;
	p->eth_type = bpf_ntohs(proto);
	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(data, data, data_end, p);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(skb, data, data, data_end, p);
	return PARSE_NON_IP;
}

/*
 * The parses after the first, global functions verified once on their own
 * (p comes back as unknown bytes): inlined, a parse is verified once per
 * state that reaches it, and each way through it multiplies the states of
 * the code after it. Only a rare path takes them, the parse again after
 * bpf_skb_pull_data (bpf/flows.h), never a packet's first parse.
 * flowlens_parse_ip reads the IP packet of ether type proto (network
 * order) at offset off of the linear data, as parse_l3 does at offset 0
 * (an L3 device's packet); flowlens_reparse is parse again, for an
 * Ethernet device's packet. The IP header at a variable offset is verified
 * once, not once per number of VLAN tags.
 * Measured: docs/benchmarks.md §27.
 */
#define PARSE_MAX_OFF 384 /* headers further in are not read */

__noinline int flowlens_parse_ip(struct __sk_buff *skb, struct pkt *p, __u64 off, __u16 proto)
{
	if (!p)
		return PARSE_MALFORMED;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	p->tcp_flags = 0;
	p->frag = FRAG_NONE;
	p->payload = 0;
	p->unread = 0;
	p->eth_type = bpf_ntohs(proto);
	if (off > PARSE_MAX_OFF)
		return PARSE_TRUNCATED;
	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(data, data + off, data_end, p);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(skb, data, data + off, data_end, p);
	return PARSE_NON_IP;
}

__noinline int flowlens_reparse(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u16 proto;
	void *nh = data + sizeof(struct ethhdr) > data_end ? NULL : vlan_tags(data, data_end, &proto);
	if (!p || !nh) {
		if (p)
			p->unread = 0;
		return PARSE_TRUNCATED;
	}
	return flowlens_parse_ip(skb, p, nh - data, proto);
}

#endif
