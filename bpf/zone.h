/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The flow key's zone (flow_key.zone, issue #29): which watched network
 * namespaces' packets may share a flow. docs/design/counting.md,
 * "Namespaces, zones and what the agent watches", states the rule and its
 * proof; the agent computes the zones (internal/agent/zones.go).
 *
 *  - A packet on a device other than loopback has the zone of its
 *    namespace's address domain: the namespaces a packet can cross into
 *    (veth peers, tunnels and their underlay, macvlan/ipvlan and their lower
 *    device) are one domain, so one packet keeps one key on every interface
 *    it crosses, and two isolated labs using the same addresses are two.
 *  - A packet on a loopback device never leaves its namespace: the
 *    namespace's own zone, exact (no two watched namespaces share one while
 *    ids last).
 *
 * The zones are in an array indexed by cookie mod ZONE_SLOTS (an inlined
 * array read, no hashing: namespace cookies are a counter, so live
 * namespaces rarely collide), with the colliding ones in a hash beside it.
 * Slot 0 (a cookie 0 names no namespace; cookies = 0 mod ZONE_SLOTS go to
 * the hash) holds the configuration: whether the watched namespaces form
 * several domains. Only then do non-loopback packets read their slot: on a
 * node whose namespaces are one domain (a Kubernetes node) their zone is 0
 * after one load.
 */
#ifndef FLOWLENS_ZONE_H
#define FLOWLENS_ZONE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Every namespace's loopback device has this ifindex (the kernel's
 * LOOPBACK_IFINDEX), and no other device can take it. */
#define LOOPBACK_IFINDEX 1

/* The zones' constants, shared with the agent (generated Go: ZoneSlots...). */
enum zone_const {
	ZONE_SLOTS = 4096,  /* entries of map zones (a power of 2) */
	ZONE_SPILL = 1024,  /* entries of map zone_spill */
	ZONE_CONF = 0,      /* the slot holding the configuration */
	ZONE_DEFAULT = 0,   /* the zone of a namespace the agent gave none (non-loopback) */
	ZONE_LO_NONE = 255, /* the same for a loopback device: never a watched one's */
};

/* One namespace's zones. Slot ZONE_CONF is the configuration: several
 * (the namespaces form more than one domain), and in domain and lo the
 * zones of a namespace given none (ZONE_DEFAULT, ZONE_LO_NONE). */
struct zone_slot {
	__u64 netns;   /* the namespace's cookie; 0: an empty slot */
	__u8 domain;   /* the zone of its non-loopback devices' packets */
	__u8 lo;       /* the zone of its loopback device's packets */
	__u8 several;  /* slot ZONE_CONF only: more than one domain */
	__u8 _pad[5];  /* always 0 */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct zone_slot);
	__uint(max_entries, ZONE_SLOTS);
} zones SEC(".maps");

/* The namespaces whose slot in zones holds another (or is ZONE_CONF). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct zone_slot);
	__uint(max_entries, ZONE_SPILL);
} zone_spill SEC(".maps");

/*
 * zone_of is the zone of a packet on device ifindex of namespace netns.
 * Every path but the one-domain fast path ends in a read of a slot (a
 * miss reads the configuration's defaults): the verifier sees one unknown
 * zone, not a constant per path, and prunes what follows. A loopback
 * packet reads its own slot only.
 */
static __always_inline __u8 zone_of(__u32 ifindex, __u64 netns)
{
	__u32 i = ZONE_CONF;
	struct zone_slot *s;
	int lo = ifindex == LOOPBACK_IFINDEX;
	if (!lo) {
		s = bpf_map_lookup_elem(&zones, &i);
		if (!s || !s->several)
			return ZONE_DEFAULT;
	}
	i = netns & (ZONE_SLOTS - 1);
	s = bpf_map_lookup_elem(&zones, &i);
	if (s && s->netns != netns) {
		s = bpf_map_lookup_elem(&zone_spill, &netns);
		if (!s) {
			i = ZONE_CONF;
			s = bpf_map_lookup_elem(&zones, &i);
		}
	}
	if (!s)
		return ZONE_DEFAULT;
	return lo ? s->lo : s->domain;
}

#endif
