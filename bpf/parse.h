/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Packet parsing for the TC programs: Ethernet (+ up to two 802.1Q/802.1ad
 * tags), IPv4, IPv6 (+ hop-by-hop, routing, fragment, destination options),
 * TCP, UDP, SCTP, ICMP, ICMPv6. Direct packet access only: every read is
 * bounds-checked against data_end, so a truncated header is detected, never
 * read past.
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

enum parse_result {
	PARSE_OK = 0,
	PARSE_NON_IP = 1,
	PARSE_TRUNCATED = 2, /* a header runs past the linear data */
	PARSE_MALFORMED = 3, /* a header is invalid */
};

/* What one packet contributes: its key and per-packet metadata. */
struct pkt {
	struct flow_key key;
	__u16 eth_type;
	__u16 tcp_flags;
	__u8 dscp;
	__u8 src_mac[6];
	__u8 dst_mac[6];
};

#define NEED(p, n) if ((void *)(p) + (n) > data_end) return PARSE_TRUNCATED

static __always_inline __u16 tcp_flags_of(const struct tcphdr *th)
{
	__u16 f = ((const __u8 *)th)[13];
	if ((f & 0x12) == 0x12) /* SYN|ACK */
		f |= TCP_SYN_ACK;
	if ((f & 0x11) == 0x11) /* FIN|ACK */
		f |= TCP_FIN_ACK;
	if ((f & 0x14) == 0x14) /* RST|ACK */
		f |= TCP_RST_ACK;
	return f;
}

/* parse_l4 fills ports / ICMP type+code. A fragment without L4 header
 * (non-first fragment) keeps them zero. */
static __always_inline int parse_l4(void *l4, void *data_end, __u8 proto, struct pkt *p)
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
		return PARSE_OK;
	}
	case IPPROTO_UDP:
	case IPPROTO_SCTP: { /* both start with 16-bit source and destination ports */
		__u16 *ports = l4;
		NEED(ports, proto == IPPROTO_UDP ? 8 : 12);
		p->key.src_port = bpf_ntohs(ports[0]);
		p->key.dst_port = bpf_ntohs(ports[1]);
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

static __always_inline int parse_ipv4(void *nh, void *data_end, struct pkt *p)
{
	struct iphdr *ip = nh;
	NEED(ip, sizeof(*ip));
	if (ip->version != 4 || ip->ihl < 5)
		return PARSE_MALFORMED;
	__u32 hlen = ip->ihl * 4;
	NEED(ip, hlen);
	/* IPv4-mapped IPv6: ::ffff:a.b.c.d (bytes 0..9 stay zero) */
	p->key.src_ip[10] = 0xff;
	p->key.src_ip[11] = 0xff;
	p->key.dst_ip[10] = 0xff;
	p->key.dst_ip[11] = 0xff;
	__builtin_memcpy(&p->key.src_ip[12], &ip->saddr, 4);
	__builtin_memcpy(&p->key.dst_ip[12], &ip->daddr, 4);
	p->key.proto = ip->protocol;
	p->dscp = ip->tos >> 2;
	if (bpf_ntohs(ip->frag_off) & IP_OFFSET)
		return PARSE_OK; /* non-first fragment: no L4 header */
	return parse_l4(nh + hlen, data_end, ip->protocol, p);
}

static __always_inline int parse_ipv6(void *nh, void *data_end, struct pkt *p)
{
	struct ipv6hdr *ip6 = nh;
	NEED(ip6, sizeof(*ip6));
	if (ip6->version != 6)
		return PARSE_MALFORMED;
	__builtin_memcpy(p->key.src_ip, &ip6->saddr, 16);
	__builtin_memcpy(p->key.dst_ip, &ip6->daddr, 16);
	p->dscp = ((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2;

	__u8 nexthdr = ip6->nexthdr;
	void *cur = nh + sizeof(*ip6);
#pragma unroll
	for (int i = 0; i < MAX_IPV6_EXT; i++) {
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS: {
			__u8 *ext = cur;
			NEED(ext, 8);
			nexthdr = ext[0];
			cur += (ext[1] + 1) * 8;
			continue;
		}
		case IPPROTO_FRAGMENT: {
			__u8 *ext = cur;
			NEED(ext, 8);
			nexthdr = ext[0];
			cur += 8;
			if (bpf_ntohs(*(__u16 *)(ext + 2)) & 0xFFF8) {
				p->key.proto = nexthdr;
				return PARSE_OK; /* non-first fragment: no L4 header */
			}
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
		return PARSE_MALFORMED;
	}
	p->key.proto = nexthdr;
	return parse_l4(cur, data_end, nexthdr, p);
}

/* parse reads the frame at skb->data into p. */
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	NEED(eth, sizeof(*eth));
	__builtin_memcpy(p->src_mac, eth->h_source, 6);
	__builtin_memcpy(p->dst_mac, eth->h_dest, 6);

	__u16 proto = bpf_ntohs(eth->h_proto);
	void *nh = data + sizeof(*eth);
#pragma unroll
	for (int i = 0; i < 2; i++) { /* QinQ: up to two tags */
		if (proto != ETH_P_8021Q_ && proto != ETH_P_8021AD_)
			break;
		__u16 *vlan = nh; /* TCI, then the encapsulated ether type */
		NEED(vlan, 4);
		proto = bpf_ntohs(vlan[1]);
		nh += 4;
	}
	p->eth_type = proto;
	if (proto == ETH_P_IP)
		return parse_ipv4(nh, data_end, p);
	if (proto == ETH_P_IPV6)
		return parse_ipv6(nh, data_end, p);
	return PARSE_NON_IP;
}

#endif
