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
 * generation), never the per-packet fast path; a function of its own (not
 * inlined): its call sites share one copy.
 */
#ifndef FLOWLENS_ORDER_H
#define FLOWLENS_ORDER_H

#include <bpf/bpf_core_read.h>
#include "core.h"
#include "types.h"

/* Device kinds as their first 8 bytes, little endian (rtnl_link_ops->kind). */
#define KIND_VETH 0x68746576ULL       /* "veth" */
#define KIND_NETKIT 0x74696b74656eULL /* "netkit" */
/* Tunnels whose outer packets bpf/tunnel.h reads through at the uplink. */
#define KIND_VXLAN 0x6e616c7876ULL      /* "vxlan" */
#define KIND_GENEVE 0x6576656e6567ULL   /* "geneve" */
#define KIND_IPIP 0x70697069ULL         /* "ipip" */
#define KIND_SIT 0x746973ULL            /* "sit" */
#define KIND_IP6TNL 0x6c6e74367069ULL   /* "ip6tnl" */
#define IFF_LOOPBACK_ 0x8

/* A non-empty adjacency list's head points away from itself. */
#define STACKED(dev, list) \
	((__u64)BPF_CORE_READ(dev, adj_list.list.next) != \
	 (__u64)(dev) + bpf_core_field_offset(struct net_device, adj_list.list))

/* order_of classifies this hook for this packet (enum hook_order). */
static __noinline int order_of(struct __sk_buff *skb, __u32 dir)
{
	if (dir == DIR_EGRESS && skb->ingress_ifindex)
		return ORDER_UNKNOWN;
	struct sk_buff *k = bpf_cast_to_kern_ctx(skb);
	struct net_device *dev = k->dev;
	if (!dev)
		return ORDER_UNKNOWN;
	if (dir == DIR_EGRESS)
		return STACKED(dev, upper) ? ORDER_UNKNOWN : ORDER_FIRST;
	if (STACKED(dev, lower) || (BPF_CORE_READ(dev, flags) & IFF_LOOPBACK_))
		return ORDER_UNKNOWN;
	__u64 kind = 0;
	const char *kp = BPF_CORE_READ(dev, rtnl_link_ops, kind);
	if (kp)
		bpf_probe_read_kernel_str(&kind, sizeof(kind), kp);
	if (kind == KIND_VETH || kind == KIND_NETKIT)
		return ORDER_UNKNOWN;
	/* Decapsulation by a tunnel whose outer packet the uplink keyed on
	 * this inner flow already (bpf/tunnel.h). */
	if (kind == KIND_VXLAN || kind == KIND_GENEVE || kind == KIND_IPIP || kind == KIND_SIT ||
	    kind == KIND_IP6TNL)
		return ORDER_UNKNOWN;
	return ORDER_FIRST;
}

#endif
