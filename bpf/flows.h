/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "flows": the TC programs. They aggregate every packet of the node's
 * interfaces into flows keyed on the 7-tuple, in the active flow map (one
 * shared hash, a spin lock per value), each packet counted once, as the
 * wire packets and bytes it stands for (bpf/wire.h), on the first observed
 * hook of its way through the node (bpf/order.h). See docs/design/
 * counting.md for the rule and its proof, and eviction.md for the generations.
 */
#ifndef FLOWLENS_FLOWS_H
#define FLOWLENS_FLOWS_H

#include <linux/pkt_cls.h>
#include "maps.h"
#include "build.h"
#include "parse.h"
#include "wire.h"
#include "frags.h"
#include "order.h"
#include "filter.h"
#include "xlat.h"
#include "tls.h"
#include "dns.h"
#include "full.h"
#include "tunnel.h"
#include "zone.h"
#include "tcp.h"

/* Load-time configuration (rewritten by the agent before loading). */
volatile const __u32 sampling = 1;     /* 1:N; 1 = every packet */
/*
 * An interface is (network namespace cookie, ifindex): ifindexes repeat
 * across namespaces. The cookie is the device's namespace's net_cookie, the
 * value SO_NETNS_COOKIE reports in user space. bpf_get_netns_cookie(skb) is
 * not it: in tc programs it gives the namespace of the packet's socket, or
 * the initial one for packets without a socket.
 *
 * netns_from_dev 1 (the agent's choice wherever this loads): the program
 * reads skb->dev->nd_net.net->net_cookie itself, so one instance serves the
 * interfaces of every namespace. netns_from_dev 0 (the fallback, for a
 * kernel that refuses that read): the agent loads one instance per
 * namespace with the cookie in netns_cookie, and the verifier drops the read.
 */
volatile const __u32 netns_from_dev = 0;
volatile const __u64 netns_cookie = 0;

/*
 * iface_netns is the cookie of the device the packet is at. The reads are
 * BTF loads from the kernel's sk_buff (bpf_cast_to_kern_ctx, inlined: no
 * call): three loads, no helper. skb->dev is always set at the tc hooks; a
 * NULL pointer on the way would read 0 (such loads fault to zero), which
 * names no namespace, rather than another namespace's cookie.
 */
static __always_inline __u64 iface_netns(struct __sk_buff *skb)
{
	if (!netns_from_dev)
		return netns_cookie;
	struct sk_buff *k = bpf_cast_to_kern_ctx(skb);
	return k->dev->nd_net.net->net_cookie;
}

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1;
}

static __always_inline int same_iface(const struct iface_obs *a, const struct iface_obs *b)
{
	return a->ifindex == b->ifindex && a->netns == b->netns;
}

/*
 * The packet, as the flow counts it. bytes, packets and now are filled by
 * measure, only on the paths that count or insert: a listed hook's steady
 * path (every second and later hook of a multi-hop packet) reads neither the
 * clock nor the skb's GSO fields (measured live: docs/benchmarks.md §9).
 */
struct wpkt {
	struct pkt *p; /* its key may be rewritten to the canonical one (bpf/xlat.h) */
	struct iface_obs me;
	__u32 bytes;   /* wire bytes */
	__u32 packets; /* wire packets */
	__u64 now;     /* jiffies */
	__u8 flags;    /* FLOW_F_* the packet brings (FLOW_F_FRAG_UNMATCHED, FLOW_F_*_UNREAD) */
	__u8 rule;     /* the filter rule it was sampled under (flow_value.rule) */
	__u32 rate;    /* that rule's sampling rate (filter_on only) */
	__u32 gen;     /* the generation of the flow map it goes to (control[CTL_GEN]) */
	__u64 tun;     /* the tunnel it was read out of (bpf/tunnel.h, TUN_WORD); 0: none */
};

/* hook_order is flowlens_order_of for this packet: an encapsulated
 * packet's egress is never certainly first (bpf/tunnel.h). */
static __always_inline int hook_order(struct __sk_buff *skb, const struct wpkt *w)
{
	if (w->tun && w->me.dir == DIR_EGRESS)
		return ORDER_UNKNOWN;
	return flowlens_order_of(skb, w->me.dir);
}

/* measure fills the packet's wire bytes and packets and the time. */
static __always_inline void measure(struct __sk_buff *skb, struct wpkt *w)
{
	w->now = bpf_jiffies64(); /* inlined: one load (bpf/clock.h) */
	wire(skb, w->p->key.proto, &w->bytes, &w->packets);
}

/*
 * or_tcp_flags adds TCP flags with an atomic OR, the only way they change
 * once the flow exists (under the lock or not), so none is lost. tcp_flags
 * is the low 16 bits of an 8-byte-aligned word whose other bytes (eth_type,
 * dscp) are written only at insertion and OR with zero here; a 64-bit OR,
 * because the object is built for BPF CPU v1, which has no 32-bit atomics.
 * Not the spin lock: a new connection brings three new flags in its first
 * packets (ACK, PSH, FIN), and the lock's IRQ save/restore took 7 % of a
 * short connection's time on live traffic (docs/benchmarks.md §9).
 */
static __always_inline void or_tcp_flags(struct flow_value *v, __u16 f)
{
	_Static_assert(__builtin_offsetof(struct flow_value, tcp_flags) % 8 == 0 &&
			       __builtin_offsetof(struct flow_value, eth_type) ==
				       __builtin_offsetof(struct flow_value, tcp_flags) + 2 &&
			       __builtin_offsetof(struct flow_value, bytes) ==
				       __builtin_offsetof(struct flow_value, tcp_flags) + 8,
		       "tcp_flags must be the low bits of an aligned 64-bit word of write-once fields");
	__sync_fetch_and_or((__u64 *)&v->tcp_flags, (__u64)f);
}

/*
 * fast tells whether this hook is the flow's counting observation in its
 * direction, the common case: the packet is added without the spin lock.
 */
static __always_inline int fast(const struct flow_value *v, const struct wpkt *w)
{
	return same_iface(&v->ifaces[0], &w->me) && v->first_dir == w->me.dir && !(v->listed_only & 1);
}

/*
 * steady tells whether this hook is known (this generation) not to be
 * first for the flow's packets: a listed hook, which only needs the flow to
 * list it, as it does; no lock, no clock, no skb field read. ifaces[0] is
 * never one: a flow's listed_only bit 0 is never set (slow sets a bit 0
 * only where it is set), and an alias's (bpf/xlat.h) ifaces[0] names no
 * interface; so the search starts at ifaces[1] (fast has compared
 * ifaces[0] already).
 */
static __always_inline int steady(const struct flow_value *v, const struct iface_obs *me)
{
	int idx = -1;
#pragma unroll
	for (int i = 1; i < MAX_IFACES; i++)
		if (idx < 0 && i < v->n_ifaces && same_iface(&v->ifaces[i], me))
			idx = i;
	return idx > 0 && (v->listed_only & (1 << idx)) &&
	       (v->ifaces[idx].dir == me->dir || v->ifaces[idx].dir == DIR_BOTH);
}

/*
 * slow adds a packet seen on a hook other than the flow's counting
 * observation and not steady: it is listed, and when the packet counts
 * here it takes over the counting (it becomes ifaces[0]: the path changed,
 * or the flow was inherited across a flip from a hook it no longer
 * crosses). Returns 1 when a seventh interface could not be recorded.
 * Not inlined: it runs once per hook and generation, and out of line it
 * keeps the per-packet code short (instruction cache, docs/benchmarks.md §9).
 */
static __noinline int slow(struct __sk_buff *skb, struct flow_value *v, const struct wpkt *w)
{
	const struct iface_obs *me = &w->me;
	int counts = hook_order(skb, w) == ORDER_FIRST;

	/* Feature "xlat": a take-over first takes back a delegation of the
	 * counting to an alias (bpf/xlat.h). */
	if (xlat_on && counts)
		xlat_handover(v, &w->p->key, w->gen);
	int lost_iface = 0;
	bpf_spin_lock(&v->lock);
	{
		int j = -1;
#pragma unroll
		for (int i = 0; i < MAX_IFACES; i++) {
			if (j < 0 && i < v->n_ifaces && same_iface(&v->ifaces[i], me)) {
				j = i;
				if (v->ifaces[i].dir != me->dir)
					v->ifaces[i].dir = DIR_BOTH;
			}
		}
		if (j < 0) {
			__u8 n = v->n_ifaces;
			if (n < MAX_IFACES) {
				v->ifaces[n] = *me;
				v->n_ifaces = n + 1;
				j = n;
			} else if (!(v->flags & FLOW_F_IFACES_OVERFLOW)) {
				v->flags |= FLOW_F_IFACES_OVERFLOW;
				lost_iface = 1;
			}
		}
		if (!counts) {
			/* Entry 0 while it counts (in its other direction) keeps its bit clear. */
			if (j > 0 || (j == 0 && (v->listed_only & 1)))
				v->listed_only |= 1 << j;
		} else {
			__sync_fetch_and_add(&v->bytes, w->bytes);
			__sync_fetch_and_add(&v->packets, w->packets);
			v->last_seen = w->now;
			or_tcp_flags(v, w->p->tcp_flags);
			v->flags |= w->flags;
			/* Hand over: this hook counts from now on (fast path). The
			 * former counting hook is re-examined at its next packet. */
			if (j > 0 && j < MAX_IFACES) {
				struct iface_obs t = v->ifaces[0];
				v->ifaces[0] = v->ifaces[j];
				v->ifaces[j] = t;
			}
			if (j >= 0) {
				v->first_dir = me->dir;
				v->listed_only &= ~(1 | (1 << j));
			}
		}
	}
	bpf_spin_unlock(&v->lock);
	return lost_iface;
}

/*
 * add counts the packet at the flow's counting observation (fast), without
 * the spin lock (measured: -55 ns/packet, docs/benchmarks.md). ifaces[0]'s
 * identity changes only on a hand-over (slow), which a packet that crossed
 * the new counting hook first has seen; the counters take atomic adds;
 * last_seen is a plain store (a racing CPU may store an older tick: off by
 * one tick at most); a new TCP flag an atomic OR; only a new FLOW_F_* flag
 * (a fragment without its first) takes the lock. The evictor reads a map
 * only after the RCU grace period, when no CPU writes it, so its reads are
 * whole.
 */
static __always_inline void add(struct flow_value *v, const struct wpkt *w)
{
	__sync_fetch_and_add(&v->bytes, w->bytes);
	__sync_fetch_and_add(&v->packets, w->packets);
	if (v->last_seen != w->now)
		v->last_seen = w->now;
	if ((v->tcp_flags | w->p->tcp_flags) != v->tcp_flags)
		or_tcp_flags(v, w->p->tcp_flags);
	if (w->flags && (v->flags & w->flags) != w->flags) {
		bpf_spin_lock(&v->lock);
		v->flags |= w->flags;
		bpf_spin_unlock(&v->lock);
	}
}

/* send_overflow sends the packet through the ring buffer (the flow map is
 * full), with its hook's order (enum hook_order) and, for ORDER_INHERITED,
 * the flow's counting observation was (else NULL); returns 1 when it went,
 * 0 when the ring was full (counted). */
static __noinline int send_overflow(struct __sk_buff *skb, const struct wpkt *w, int order, int l3,
				    const struct iface_obs *was)
{
	struct overflow_rec *r = bpf_ringbuf_reserve(&overflow, sizeof(*r), 0);
	if (!r) {
		count(CNT_OVERFLOW_LOST);
		return 0;
	}
	r->key = w->p->key;
	if (xlat_on && order == ORDER_SPLIT)
		xlat_own_key(&r->key, w->gen); /* counted by an alias: its flow's */
	r->iface = w->me;
	r->ts = w->now;
	r->bytes = w->bytes;
	r->packets = w->packets;
	r->eth_type = w->p->eth_type;
	r->tcp_flags = w->p->tcp_flags;
	__builtin_memset(r->src_mac, 0, 12);
	if (!l3)
		copy_macs(skb, r->src_mac, r->dst_mac);
	r->dscp = w->p->dscp;
	r->order = order;
	r->flags = w->flags;
	r->rule = w->rule;
	__builtin_memset(r->_pad, 0, sizeof(r->_pad));
	if (was)
		r->was = *was;
	else
		__builtin_memset(&r->was, 0, sizeof(r->was));
	bpf_ringbuf_submit(r, overflow_wake());
	count(CNT_OVERFLOW_RECORDS);
	return 1;
}

static __always_inline int same_obs(const struct iface_obs *a, const struct iface_obs *b)
{
	return same_iface(a, b) && a->dir == b->dir;
}

/*
 * remember records in overflow_seen the counting observation that the
 * evictor's aggregation of the ring (internal/agent/evictor/overflow.go, add)
 * gives the flow of a packet just sent there (not ORDER_SPLIT), by the
 * same rule, so that the next generation's insert inherits it as it would
 * from the previous map: a packet counted from the ring before a flip is
 * not counted again by a later hook that finds room in the fresh map. The
 * rule: the generation's first record of the flow makes its observation
 * the counting one, unless the previous generation counted the flow on
 * another (inherited: this one counts nothing), for a hook that is not
 * certainly first; a record on the counting observation counts; a
 * certainly-first hook counts and takes over. (An ORDER_INHERITED record
 * does not come here: it counts nothing, and its flow's counting
 * observation is remembered when a record counts there.) Not inlined: only
 * packets that found the map full come here.
 */
static __noinline void remember(const struct flow_key *key, const struct iface_obs *me, int order, __u32 gen)
{
	struct overflow_seen *s = bpf_map_lookup_elem(&overflow_seen, key);
	struct overflow_seen n = {.obs = *me, .gen = gen, .counted = 1};
	if (s && s->gen == gen) {
		if (order != ORDER_FIRST && !same_obs(&s->obs, me))
			return; /* listed */
		if (same_obs(&s->obs, me)) {
			if (!s->counted)
				s->counted = 1;
			return;
		}
		/* A certainly-first hook takes over: a whole new value (an
		 * update is atomic for a reader, a field-by-field store is not). */
	} else {
		if (s && order != ORDER_FIRST && s->gen == gen - 1 && s->counted && !same_obs(&s->obs, me)) {
			n.obs = s->obs; /* inherited: this hook is listed */
			n.counted = 0;
		}
		__u32 slot = CTL_OVERFLOWED + (gen & 1);
		__u32 *o = bpf_map_lookup_elem(&control, &slot);
		if (o && *o != gen + 1)
			*o = gen + 1;
	}
	bpf_map_update_elem(&overflow_seen, key, &n, BPF_ANY);
}

/*
 * insert creates the flow of a packet new in the active map "cur". The
 * flow is counted here when this hook is the packet's first (bpf/order.h);
 * when that is unknown, by the first-seen rule: here, unless the previous
 * generation counted the flow on another hook, which it then inherits, so
 * a packet counted before a flip is not counted again at a later hook
 * after it. The previous generation is its map "prev" (read by the agent,
 * not written), or, for a flow that had no room there and went through
 * the ring buffer, what remember kept of it. Returns 1 when another CPU
 * inserted the flow first (the caller adds the packet to it), 0 when
 * inserted, or when the map is full INSERT_OVERFLOW with the hook's order
 * in the low byte, INSERT_COUNTS when the packet counts here, and in *out
 * the counting observation. Out of line, like slow (once per flow and
 * generation, out of the per-packet code's way): flowlens_insert below.
 */
#define INSERT_OVERFLOW 0x100
#define INSERT_COUNTS 0x200

static __always_inline int insert(struct __sk_buff *skb, void *cur, void *prev, const struct wpkt *w,
				   const struct pkt *p, int l3, struct iface_obs *out)
{
	const struct iface_obs *me = &w->me;
	/* The hook that counted the flow in the previous generation, if
	 * any: one that counted nothing there is not inherited (a packet
	 * in flight across the flip was counted there, so it counted),
	 * which bounds a stale counting point to one generation. */
	/* Zeroed: clang may copy it, unset, between registers, which the
	 * verifier refuses (an uninitialized register read). */
	struct iface_obs was = {};
	int inherit = 0;
	__u32 gen = w->gen;
	/* A certainly-first hook counts whatever the previous generation
	 * did: it skips looking the flow up there (a hash of the key; a miss
	 * for a new flow). Asked first on egress only, where the order is one
	 * to three loads (bpf/order.h); on ingress it may take the device's
	 * kind (a helper call), and a veth's ingress, the usual first hook of
	 * a pod's flow, is never certainly first. */
	int first = me->dir == DIR_EGRESS && hook_order(skb, w) == ORDER_FIRST;
	struct flow_value *old = first ? NULL : bpf_map_lookup_elem(prev, &p->key);
	if (old) {
		if (old->packets && !(old->listed_only & 1)) {
			was = old->ifaces[0];
			was.dir = old->first_dir;
			inherit = 1;
		}
	} else if (!first) {
		/* Did the flow go through the ring in the previous generation?
		 * Asked only when that generation overflowed at all. */
		__u32 slot = CTL_OVERFLOWED + ((gen - 1) & 1);
		__u32 *o = bpf_map_lookup_elem(&control, &slot);
		struct overflow_seen *s = gen && o && *o == gen ? bpf_map_lookup_elem(&overflow_seen, &p->key) : NULL;
		if (s && s->gen == gen - 1 && s->counted) {
			was = s->obs;
			inherit = 1;
		}
	}
	inherit = inherit && !same_obs(&was, me);
	/* Only an inherited flow needs the hook's order (not a new one). */
	int order = inherit ? hook_order(skb, w) : -1;
	int counts = !inherit || order == ORDER_FIRST;

	/* Built in this CPU's buffer, zeroed, not on the stack (bpf/build.h). */
	struct flow_value *nv = flow_build_value();
	/* Known full (bpf/full.h): the insert would fail the same way. */
	long err = -E2BIG_;
	if (nv && !full_known(CTL_FLOWS_FULL, gen)) {
		nv->first_seen = w->now;
		nv->last_seen = w->now;
		nv->eth_type = p->eth_type;
		nv->dscp = p->dscp;
		if (!l3)
			copy_macs(skb, nv->src_mac, nv->dst_mac);
		nv->ifaces[0] = *me;
		nv->first_dir = me->dir;
		nv->n_ifaces = 1;
		nv->flags = w->flags;
		nv->rule = w->rule;
		if (counts) {
			nv->bytes = w->bytes;
			nv->packets = w->packets;
			nv->tcp_flags = p->tcp_flags;
		} else if (inherit) {
			/* Inherit the counting interface; this one is only listed. */
			nv->ifaces[0] = was;
			nv->first_dir = was.dir;
			nv->ifaces[1] = *me;
			nv->n_ifaces = 2;
			nv->listed_only = 1 << 1;
		}
		err = bpf_map_update_elem(cur, &p->key, nv, BPF_NOEXIST);
		if (err == 0) {
			count(CNT_NEW_FLOWS);
			return 0;
		}
		if (err == -17 /* EEXIST */)
			return 1;
		full_note(CTL_FLOWS_FULL, gen, err);
	}
	if (order < 0)
		order = hook_order(skb, w);
	/* To the ring (flowlens_insert): an inherited flow's listed hook with
	 * the counting observation (was), else with none. */
	*out = counts ? *me : was;
	return INSERT_OVERFLOW | (counts ? INSERT_COUNTS : 0) | (order & 0xff);
}

/*
 * flowlens_insert is insert as a global function, verified once on its own
 * instead of in each verifier state of its callers that reaches it (the two
 * generations' maps, the IPv4 and IPv6 keys: ten states, a third of the TC
 * programs' verified instructions, docs/benchmarks.md §38). A global
 * function takes no map pointer and no pointer stored in memory (w->p): it
 * takes the packet p and w (wc, which it only reads), and the maps come from
 * the generation as handle picks them. The verifier takes what a global
 * function is given as written with unknown bytes: the caller writes w->p
 * back after the call (no copy of w on its stack: the TC programs' stack
 * chains stay within 512 bytes), and reads p's fields as unknown. Returns
 * as insert does.
 */
__noinline int flowlens_insert(struct __sk_buff *skb, struct pkt *p, struct wpkt *wc, int l3)
{
	if (!p || !wc)
		return 0;
	struct iface_obs was;
	int r = wc->gen & 1 ? insert(skb, &flows_b, &flows_a, wc, p, l3, &was)
			    : insert(skb, &flows_a, &flows_b, wc, p, l3, &was);
	if (!(r & INSERT_OVERFLOW))
		return r;
	/* The map is full (rare). send_overflow reads w->p: a wpkt of our
	 * own, on this frame (the new flow value is not on it: bpf/build.h). */
	struct wpkt w = *wc;
	w.p = p;
	int order = r & 0xff;
	if (!(r & INSERT_COUNTS)) {
		/* An inherited flow's listed hook: the ring's aggregation lists
		 * it on the counting observation (was). Nothing to remember:
		 * the flow's counting observation is remembered when a record
		 * counts there, as it would be without this one. */
		send_overflow(skb, &w, ORDER_INHERITED, l3, &was);
		return 0;
	}
	if (send_overflow(skb, &w, order, l3, NULL))
		remember(&p->key, &w.me, order, w.gen);
	return 0;
}

/*
 * xlat_via takes a packet whose tuple is an alias's (feature "xlat",
 * bpf/xlat.h) to the flow the alias names: it returns that flow's entry
 * (NULL: none yet, the caller inserts it under the key now in w), or the
 * alias itself when the packet is done: a hook the flow lists as steady
 * (the alias lists it from now on), or a flow of its own whose key's
 * entry the alias holds (through the ring, as when the map is full). Not
 * inlined: once per hook and generation for a listed hook after NAT and
 * for the flow's counting hook (which the alias then counts:
 * xlat_delegate), per packet only for a counting hook whose delegation a
 * hand-over took back (bpf/xlat.h, xlat_handover); never on other flows'
 * paths.
 */
static __noinline struct flow_value *xlat_via(struct __sk_buff *skb, void *cur, struct wpkt *w,
					      struct flow_value *alias, int l3)
{
	struct flow_key t = w->p->key; /* T: a delegation's note names it (bpf/xlat.h) */
	if (!xlat_follow(alias, &w->p->key, &w->me)) {
		measure(skb, w);
		int order = hook_order(skb, w);
		if (send_overflow(skb, w, order, l3, NULL))
			remember(&w->p->key, &w->me, order, w->gen);
		return alias;
	}
	struct flow_value *v = bpf_map_lookup_elem(cur, &w->p->key);
	if (v && !fast(v, w) && steady(v, &w->me)) {
		xlat_mirror(alias, &w->me);
		return alias;
	}
	/* The flow's counting hook: once per alias, may it count here? Not
	 * before the flow counted a packet of its own (its inheritance at
	 * the next flip asks whether it counted: bpf/xlat.h). */
	if (v && !(alias->flags & FLOW_F_XLAT_DONE) && v->packets && fast(v, w))
		xlat_delegate(alias, v, &w->me,
			      hook_order(skb, w) == ORDER_FIRST || xlat_note(cur, &w->p->key, &t, w->gen));
	return v;
}

/*
 * record adds the packet to the active map "cur" (see insert for a flow
 * new there). Per packet, a hook is either the flow's counting observation
 * (fast, add) or a steady listed one (steady: nothing to write); only
 * these two paths run for every packet, and only the first reads the clock
 * and the skb's size fields (measure).
 */
static __always_inline void record(struct __sk_buff *skb, void *cur, void *prev,
				   struct wpkt *w, int l3)
{
	struct flow_value *v = bpf_map_lookup_elem(cur, &w->p->key);
	/* Feature "xlat": a packet after NAT goes to its flow before NAT
	 * (bpf/xlat.h), through an alias kept under its tuple. */
	if (!v && xlat_on) {
		struct flow_key post = w->p->key;
		if (xlat_redirect(skb, &w->p->key, w->me.netns, w->gen, w->me.dir)) {
			xlat_alias_put(cur, &post, w->gen);
			v = bpf_map_lookup_elem(cur, &w->p->key);
		}
	}
	int counting = v && fast(v, w);
	if (v && !counting && steady(v, &w->me))
		return; /* a listed hook: every second and later hook of a packet */
	if (!counting && v && xlat_on && (v->flags & FLOW_F_XLAT_ALIAS)) {
		struct flow_value *alias = v;
		v = xlat_via(skb, cur, w, alias, l3);
		if (v == alias)
			return;
		counting = v && fast(v, w);
	}
	measure(skb, w);
	if (!v) {
		struct pkt *p = w->p;
		int r = flowlens_insert(skb, p, w, l3);
		w->p = p; /* the call left w's bytes unknown to the verifier */
		if (!r) {
			if (overlay_on && w->tun)
				flowlens_tunnel_note(skb, &w->p->key, w->tun, w->gen);
			if (xlat_on)
				xlat_lookup(skb, &w->p->key);
			if (tcp_on && w->p->key.proto == IPPROTO_TCP)
				tcp_new_flow(&w->p->key, w->gen); /* its role, once per generation */
			return;
		}
		v = bpf_map_lookup_elem(cur, &w->p->key);
		if (!v) { /* cannot happen: the active map is never deleted from */
			send_overflow(skb, w, hook_order(skb, w), l3, NULL);
			return;
		}
		counting = fast(v, w);
	}
	if (counting && filter_on && v->rule != w->rule && rate_of(v->rule) != w->rate) {
		/* A flow's record has one rate, so that packets x sampling is
		 * unbiased: a packet counted here under another one (a SYN rule
		 * at 1 in a flow sampled 1:100) gets a record of its own. */
		send_overflow(skb, w, ORDER_SPLIT, l3, NULL);
		count(CNT_SAMPLING_SPLIT);
		return;
	}
	if (counting) {
		add(v, w);
		/* Feature "xlat": conntrack, on a flow's first packets only. */
		if (xlat_on && !(v->flags & FLOW_F_XLAT_DONE) && v->packets <= XLAT_TRIES &&
		    xlat_lookup(skb, &w->p->key)) {
			bpf_spin_lock(&v->lock);
			v->flags |= FLOW_F_XLAT_DONE;
			bpf_spin_unlock(&v->lock);
		}
	} else {
		if (slow(skb, v, w))
			count(CNT_IFACES_OVERFLOW);
		if (overlay_on && w->tun)
			flowlens_tunnel_note(skb, &w->p->key, w->tun, w->gen);
		/* Feature "xlat": the counting hook may be in a namespace whose
		 * conntrack knows no NAT (a pod's); a listed hook of another
		 * namespace asks (once per hook and generation: then steady).
		 * Not the counting interface's other direction, which comes
		 * here at every packet. */
		if (xlat_on && v->ifaces[0].netns != w->me.netns)
			xlat_lookup(skb, &w->p->key);
	}
}

static __always_inline int handle(struct __sk_buff *skb, __u32 dir, int l3)
{
	/* Without rules, the global rate applies before anything is read. */
	if (!filter_on && sampling > 1 && bpf_get_prandom_u32() % sampling != 0)
		return TC_ACT_UNSPEC;

	struct pkt p; /* not zeroed: parse writes every field it returns PARSE_OK for */
	int r = l3 ? parse_l3(skb, &p) : parse(skb, &p);
	if (r == PARSE_TRUNCATED && skb->len > skb->data_end - skb->data) {
		/* Headers beyond the linear area (rare): pull them in and retry. */
		__u32 want = skb->len < 256 ? skb->len : 256;
		if (bpf_skb_pull_data(skb, want) == 0) /* parsed again out of line (bpf/parse.h) */
			r = l3 ? flowlens_parse_ip(skb, &p, 0, skb->protocol) : flowlens_reparse(skb, &p);
	}
	if (r == PARSE_NON_IP) {
		count(CNT_NON_IP);
		return TC_ACT_UNSPEC;
	}
	/* A header not read after the addresses still counts, flagged
	 * (p.unread, bpf/parse.h); before them, a counter by reason. */
	if (r != PARSE_OK && !p.unread) {
		count(r == PARSE_TRUNCATED ? CNT_TRUNCATED : CNT_MALFORMED);
		return TC_ACT_UNSPEC;
	}

	/* A tunnel packet counts in its inner flow (bpf/tunnel.h). */
	struct wpkt w = {
		.p = &p,
		.me = {.netns = iface_netns(skb), .ifindex = skb->ifindex, .dir = dir},
		.flags = p.unread,
	};
	if (tunnel_candidate(&p))
		w.tun = flowlens_tunnel_inner(skb, &p, l3, &w.me);
	if (p.frag) { /* rare: one test on the common path */
		if (p.frag == FRAG_FIRST) {
			frag_remember(&p.key, p.frag_id);
		} else if (!frag_resolve(&p.key, p.frag_id)) {
			w.flags |= FLOW_F_FRAG_UNMATCHED;
			count(CNT_FRAG_UNMATCHED);
		}
	}
	/* Its address domain's zone, or on loopback its namespace's (bpf/zone.h). */
	p.key.zone = zone_of(w.me.ifindex, w.me.netns);
	if (filter_on) {
		__u64 vd = flowlens_filter(&p, &w.me);
		if (!(vd & 0x100)) {
			count(CNT_FILTER_REJECTED);
			return TC_ACT_UNSPEC;
		}
		w.rate = vd >> 32;
		if (w.rate > 1 && bpf_get_prandom_u32() % w.rate != 0) {
			count(CNT_SAMPLED_OUT);
			return TC_ACT_UNSPEC;
		}
		w.rule = vd & 0xff;
	}
	/* Feature "tcp": SYN, RST, FIN, zero window (after the flow map). The
	 * zero-window marker never reaches a flow. */
	__u16 tcp_seg = tcp_on ? p.tcp_flags & TCP_SEG_MASK : 0;
	p.tcp_flags &= ~TCP_ZERO_WIN;
	/* Feature "dns": a message to or from the DNS ports, tested on the
	 * packet's own tuple, and with "xlat" on its flow's key before NAT
	 * (bpf/dns.h, dns_mark and dns_after_record). 2, 3, 7 or 10, never 0:
	 * the verifier tracks a stored 0 apart from other values, which
	 * would double the states it walks through record(). */
	if (dns_on)
		p.dns = dns_mark(&p);
	__u32 slot = CTL_GEN;
	__u32 *gen = bpf_map_lookup_elem(&control, &slot);
	/* The programs go on writing the map they picked here, even across
	 * a flip (the agent waits for them): w.gen is that map's generation. */
	w.gen = gen ? *gen : 0;
	if (w.gen & 1)
		record(skb, &flows_b, &flows_a, &w, l3);
	else
		record(skb, &flows_a, &flows_b, &w, l3);
	/* Features "tls" (hellos, QUIC long headers) and "dns", after the flow
	 * map: under the key record() gave the packet, its flow's before NAT
	 * (bpf/xlatkey.h). */
	if (tls_on)
		tls_inspect(skb, &p, &w.me);
	if (dns_on) {
		if (p.dns & 8)
			dns_after_record(skb, &p);
		if (p.dns & 1)
			dns_inspect(skb, &p, &w.me);
	}
	if (tcp_seg)
		tcp_segment(skb, &p, &w.me, w.gen, tcp_seg);
	return TC_ACT_UNSPEC; /* TCX_NEXT: let the next program / the stack decide */
}

SEC("tc")
int flowlens_ingress(struct __sk_buff *skb)
{
	return handle(skb, DIR_INGRESS, 0);
}

SEC("tc")
int flowlens_egress(struct __sk_buff *skb)
{
	return handle(skb, DIR_EGRESS, 0);
}

/* Devices without a link-layer header (tun, WireGuard, ipip, gre...): the
 * agent attaches these instead, so the Ethernet programs test nothing. */
SEC("tc")
int flowlens_ingress_l3(struct __sk_buff *skb)
{
	return handle(skb, DIR_INGRESS, 1);
}

SEC("tc")
int flowlens_egress_l3(struct __sk_buff *skb)
{
	return handle(skb, DIR_EGRESS, 1);
}

#endif
