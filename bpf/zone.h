/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The flow key's zone (flow_key.zone, issue #29): non-zero only for
 * traffic that cannot leave its network namespace, the packets of a
 * loopback device, so that the same loopback tuple in two namespaces
 * (127.0.0.1:x -> 127.0.0.1:8080 in two pods) makes two flows, while a
 * packet that crosses a veth pair between namespaces keeps zone 0 on both
 * sides and stays one flow. The zone is the namespace's cookie folded to
 * 1..255 (cookie mod 255, 255 for a multiple): two namespaces share a zone
 * only when their cookies are congruent mod 255 (docs/design/
 * counting.md, "Namespaces and zones", states the limit). Computed, not
 * looked up: a few ALU instructions on loopback packets, nothing elsewhere.
 */
#ifndef FLOWLENS_ZONE_H
#define FLOWLENS_ZONE_H

#include <linux/types.h>

/* Every namespace's loopback device has this ifindex (the kernel's
 * LOOPBACK_IFINDEX), and no other device can take it. */
#define LOOPBACK_IFINDEX 1

/*
 * lo_zone folds a namespace cookie to 1..255 (0 only for cookie 0, which
 * names no namespace): 256 = 1 (mod 255), so summing a number's base-256
 * digits keeps it mod 255, and a non-zero sum stays non-zero. Each step
 * bounds the value: < 2^33, < 2^18, < 1023, < 259, <= 255.
 */
static __always_inline __u8 lo_zone(__u64 c)
{
	c = (c & 0xffffffff) + (c >> 32);
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xff) + (c >> 8);
	c = (c & 0xff) + (c >> 8);
	c = (c & 0xff) + (c >> 8);
	return c;
}

/* zone_of is the zone of a packet on device ifindex of namespace netns. */
static __always_inline __u8 zone_of(__u32 ifindex, __u64 netns)
{
	return ifindex == LOOPBACK_IFINDEX ? lo_zone(netns) : 0;
}

#endif
