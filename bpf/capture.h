// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Types shared between bpf/capture.c (the on-demand packet capture program,
 * issue #32) and internal/agent/capture, which gets their Go mirrors from
 * bpf2go (-type in internal/agent/capture/gen.go), never copies them.
 * The capture is its own object: nothing here is part of the flow programs.
 */
#ifndef FLOWLENS_CAPTURE_H
#define FLOWLENS_CAPTURE_H

#include <linux/types.h>

/* Bounds of the filter's lists (a capture's Filter longer than these is
 * refused by the agent, with the bound in the error). */
#define CAP_MAX_CIDRS 16
#define CAP_MAX_PORTS 16
#define CAP_MAX_PROTOS 8
#define CAP_MAX_FLAGS 8

/* An address prefix, IPv4 mapped into IPv6 (::ffff:a.b.c.d, mask 96+len),
 * as four network-order words, the address already masked. */
struct cap_prefix {
	__u32 addr[4];
	__u32 mask[4];
};

/* The filter, a load-time constant of each program instance: every list
 * with n > 0 must match (AND); a list matches when one entry does (OR). */
struct cap_filter {
	__u32 n_cidrs, n_src, n_dst;
	__u32 n_ports, n_sports, n_dports;
	__u32 n_protos, n_flags;
	__u32 needs_ip; /* some field above is set: non-IP packets never match */
	__u32 n_peer;   /* with n_cidrs > 0 (the agent ensures it): one end in cidrs, the other in peer */
	struct cap_prefix cidrs[CAP_MAX_CIDRS];
	struct cap_prefix peer[CAP_MAX_CIDRS];
	struct cap_prefix src[CAP_MAX_CIDRS];
	struct cap_prefix dst[CAP_MAX_CIDRS];
	__u16 ports[CAP_MAX_PORTS]; /* host order */
	__u16 sports[CAP_MAX_PORTS];
	__u16 dports[CAP_MAX_PORTS];
	__u16 flags[CAP_MAX_FLAGS]; /* a packet matches a mask when it has all its bits */
	__u8 protos[CAP_MAX_PROTOS];
};

/* What precedes each copied packet in the ring. */
struct cap_meta {
	__u64 ts;       /* bpf_ktime_get_ns (CLOCK_MONOTONIC); the agent adds the wall-clock offset */
	__u64 ns;       /* the instance's namespace, an index the agent gave it (a load-time constant) */
	__u32 ifindex;  /* skb->ifindex: the hooked device */
	__u32 wire_len; /* skb->len */
	__u32 cap_len;  /* bytes that follow (the record is meta + cap_len bytes) */
	__u32 dir;      /* 1 ingress, 2 egress (capture.Direction) */
};

/* Slots of the per-CPU counter map cap_counts. */
enum cap_count {
	CAP_COUNT_MATCHED = 0,   /* matched the filter */
	CAP_COUNT_RING_FULL = 1, /* matched, but the ring could not take it */
	CAP_COUNT_MAX = 2,
};

#endif
