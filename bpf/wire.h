/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "flows", counting: what one skb stands for on the wire. A GSO
 * buffer (TSO on the way out, GRO on the way in) is many packets: gso_segs
 * of them, each carrying its own copy of the headers, so the wire bytes are
 * skb->len plus the headers repeated for every segment after the first. A
 * VLAN tag the kernel holds in the skb (not in the frame) is on the wire in
 * every segment. docs/design/counting.md states the rule.
 */
#ifndef FLOWLENS_WIRE_H
#define FLOWLENS_WIRE_H

#include <bpf/bpf_core_read.h>
#include "core.h"
#include "parse.h"

/*
 * gso_hdr_len is the header bytes repeated in every segment: link and
 * network headers up to the transport header (the inner one when the
 * kernel tunnels the buffer), plus the TCP or UDP header; what the kernel's
 * own qdisc_pkt_len_init() counts. Tunnelled GSO carries TCP. 0 when the
 * kernel has no transport header for the skb.
 */
static __always_inline __u32 gso_hdr_len(struct __sk_buff *skb, __u8 proto)
{
	struct sk_buff *k = bpf_cast_to_kern_ctx(skb);
	__u16 th = k->transport_header;
	if (BPF_CORE_READ_BITFIELD(k, encapsulation)) {
		th = k->inner_transport_header;
		proto = IPPROTO_TCP;
	}
	if (th == (__u16)~0U)
		return 0;
	__u32 off = th - (__u32)((__u64)k->data - (__u64)k->head); /* from skb->data */
	if (off > 512)
		return 0;
	if (proto == IPPROTO_UDP)
		return off + 8;
	if (proto != IPPROTO_TCP)
		return off;
	__u8 doff;
	if (bpf_skb_load_bytes(skb, off + 12, &doff, 1))
		return 0;
	return off + (doff >> 4) * 4;
}

/*
 * gso_wire is the rule itself, for a GSO buffer of len bytes (headers
 * included), gso_size bytes of payload per segment, gso_segs segments as
 * the kernel counted them (0: not yet, SKB_GSO_DODGY), hdr bytes of headers
 * per segment and a VLAN tag of tag bytes held outside the frame. The TC
 * programs (wire, below) and the drop hook (bpf/drops.h) share it.
 */
static __always_inline void gso_wire(__u32 len, __u32 gso_size, __u32 gso_segs, __u32 hdr, __u32 tag,
				     __u32 *bytes, __u32 *packets)
{
	__u32 segs = 1, n = gso_segs;
	if (n == 0 && len > hdr)
		n = (len - hdr + gso_size - 1) / gso_size;
	if (n > 1 && n < 65536) {
		segs = n;
		len += (n - 1) * hdr;
	}
	*bytes = len + segs * tag;
	*packets = segs;
}

/*
 * flowlens_gso_wire is the wire bytes (low 32 bits) and packets (high 32)
 * of a GSO skb. A global function, verified once on its own rather than in
 * each verifier state that measures a packet (~20 per TC program; measured:
 * docs/benchmarks.md §27); only GSO buffers (each many packets) pay the call.
 */
__noinline __u64 flowlens_gso_wire(struct __sk_buff *skb, __u32 proto)
{
	__u32 bytes, packets;
	gso_wire(skb->len, skb->gso_size, skb->gso_segs, gso_hdr_len(skb, proto), skb->vlan_present ? 4 : 0,
		 &bytes, &packets);
	return ((__u64)packets << 32) | bytes;
}

/* wire sets the wire bytes and packets the skb stands for. */
static __always_inline void wire(struct __sk_buff *skb, __u8 proto, __u32 *bytes, __u32 *packets)
{
	__u32 gso = skb->gso_size;
	if (!gso) { /* the common case: one packet */
		*bytes = skb->len + (skb->vlan_present ? 4 : 0);
		*packets = 1;
		return;
	}
	/* Bulk TCP (and UDP GSO). */
	__u64 bp = flowlens_gso_wire(skb, proto);
	*bytes = (__u32)bp;
	*packets = bp >> 32;
}

#endif
