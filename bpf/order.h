/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "flows", dedup: whether a hook is certainly the first observed
 * hook of a packet's way through the node, from facts about the packet and
 * the device rather than about the flow, so the answer holds for every
 * packet, across generation flips and path changes (docs/design/counting.md
 * states the rule and its proof):
 *
 *   egress of a packet this namespace did not receive (skb_iif 0: sent by a
 *   local socket, or re-emitted by a tunnel under a new outer header), on a
 *   device with nothing stacked above it                     ORDER_FIRST
 *   ingress of a device with nothing stacked under it that
 *   is not a namespace pair or a loop (NIC, tun, WireGuard,
 *   gre decapsulation)                                       ORDER_FIRST
 *   ingress of a VXLAN, Geneve or IP-in-IP device (its
 *   outer packet was keyed on the inner flow at the uplink,
 *   bpf/tunnel.h), and any packet's egress that bpf/flows.h
 *   read out of a tunnel (hook_order)                        ORDER_UNKNOWN
 *   anything else: forwarded or bridged egress, a bridge
 *   port's or bond member's egress, an upper device's
 *   ingress, veth/netkit/loopback ingress                    ORDER_UNKNOWN
 *
 * ORDER_UNKNOWN leaves the decision to the flow's counting observation.
 * veth ingress is UNKNOWN, not "first unless the peer saw it": a packet that
 * another tc program moved with bpf_redirect_peer (Cilium, Calico eBPF)
 * reaches a pod's veth ingress without crossing the peer's egress.
 *
 * Only the flow's slow path asks (a hook's first packet of the flow in a
 * generation), never the per-packet fast path; a global function, verified
 * once on its own rather than in each of the ~40 verifier states of its
 * callers that reach it (docs/benchmarks.md §27).
 */
#ifndef FLOWLENS_ORDER_H
#define FLOWLENS_ORDER_H

#include <bpf/bpf_core_read.h>
#include "core.h"
#include "types.h"

/* Device kinds as their first 8 bytes, little endian (rtnl_link_ops->kind),
 * and the mask of the bytes that name them with their NUL (KIND_IS). */
#define KIND_VETH 0x68746576ULL       /* "veth" */
#define KIND_NETKIT 0x74696b74656eULL /* "netkit" */
/* Tunnels whose outer packets bpf/tunnel.h reads through at the uplink. */
#define KIND_VXLAN 0x6e616c7876ULL      /* "vxlan" */
#define KIND_GENEVE 0x6576656e6567ULL   /* "geneve" */
#define KIND_IPIP 0x70697069ULL         /* "ipip" */
#define KIND_SIT 0x746973ULL            /* "sit" */
#define KIND_IP6TNL 0x6c6e74367069ULL   /* "ip6tnl" */
#define KIND_IS(k, K, len) (((k) & ((1ULL << (8 * ((len) + 1))) - 1)) == (K))
#define IFF_LOOPBACK_ 0x8

/* A non-empty adjacency list's head points away from itself. Plain BTF
 * loads from the device (PROBE_MEM, inlined), not helper calls. */
#define STACKED(dev, list) ((__u64)(dev)->adj_list.list.next != (__u64)&(dev)->adj_list.list)

/*
 * kind_of is the device kind's first 8 bytes (0: none). One 8-byte read of
 * the string, the bytes after its NUL included (KIND_IS masks them): a
 * fixed-size copy, not the helper that scans for the NUL byte by byte; a
 * string so near the end of a mapping that 8 bytes fault is read again up
 * to its NUL.
 */
static __always_inline __u64 kind_of(const struct net_device *dev)
{
	__u64 kind = 0;
	const struct rtnl_link_ops *ops = dev->rtnl_link_ops;
	const char *kp = ops ? ops->kind : NULL;
	if (kp && bpf_probe_read_kernel(&kind, sizeof(kind), kp) < 0)
		bpf_probe_read_kernel_str(&kind, sizeof(kind), kp);
	return kind;
}

/* order_of classifies this hook for this packet (enum hook_order). */
__noinline int flowlens_order_of(struct __sk_buff *skb, __u32 dir)
{
	if (dir == DIR_EGRESS && skb->ingress_ifindex)
		return ORDER_UNKNOWN;
	struct sk_buff *k = UNTRUSTED(bpf_cast_to_kern_ctx(skb), struct sk_buff); /* bpf/core.h */
	struct net_device *dev = k->dev;
	if (!dev)
		return ORDER_UNKNOWN;
	if (dir == DIR_EGRESS)
		return STACKED(dev, upper) ? ORDER_UNKNOWN : ORDER_FIRST;
	if (STACKED(dev, lower) || (dev->flags & IFF_LOOPBACK_))
		return ORDER_UNKNOWN;
	__u64 kind = kind_of(dev);
	if (KIND_IS(kind, KIND_VETH, 4) || KIND_IS(kind, KIND_NETKIT, 6))
		return ORDER_UNKNOWN;
	/* Decapsulation by a tunnel whose outer packet the uplink keyed on
	 * this inner flow already (bpf/tunnel.h). */
	if (KIND_IS(kind, KIND_VXLAN, 5) || KIND_IS(kind, KIND_GENEVE, 6) || KIND_IS(kind, KIND_IPIP, 4) ||
	    KIND_IS(kind, KIND_SIT, 3) || KIND_IS(kind, KIND_IP6TNL, 6))
		return ORDER_UNKNOWN;
	return ORDER_FIRST;
}

#endif
