/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "xlat": conntrack NAT translation per flow. For a flow whose
 * addresses conntrack rewrites (kube-proxy's DNAT of a Service's virtual IP
 * to a backend, SNAT, masquerade), the flow's enrichment entry gets the
 * source and destination the packets have after NAT. Go side:
 * internal/agent/feature/xlat; docs/xlat.md.
 *
 * Where: inside the TC programs, through the conntrack kfunc
 * bpf_skb_ct_lookup, which finds the connection of the packet's own tuple
 * in the device's namespace. (kprobes on the NAT functions, NetObserv's
 * way, do not exist on every kernel; this kernel has none and refuses
 * fentry.) Which tuple matched (original or reply direction) says which way
 * the packet goes, and the other direction's tuple, reversed, is what NAT
 * makes of it.
 *
 * When: a lookup costs a hash probe in the conntrack table, so it runs only
 * on the first packets of a flow in a generation, at its counting hook,
 * until conntrack knows the flow (a connection's first packet reaches TC
 * ingress before conntrack creates its entry): at most XLAT_TRIES packets,
 * then FLOW_F_XLAT_DONE or the packet count stops it. Off (xlat_on 0),
 * none of this is compiled in.
 */
#ifndef FLOWLENS_XLAT_H
#define FLOWLENS_XLAT_H

#include "enrich.h"
#include "build.h"

volatile const __u32 xlat_on = 0;

#define XLAT_TRIES 4
#define IPS_SRC_NAT_ (1UL << 4)
#define IPS_DST_NAT_ (1UL << 5)
#define IP_CT_DIR_REPLY_ 1

/* The kernel's struct bpf_ct_opts (NF_BPF_CT_OPTS_SZ, 16 bytes). */
struct bpf_ct_opts___fl {
	__s32 netns_id; /* -1: the skb's device's namespace */
	__s32 error;
	__u8 l4proto;
	__u8 dir; /* out: the direction whose tuple matched */
	__u16 ct_zone_id;
	__u8 ct_zone_dir;
	__u8 reserved[3];
};

extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *skb, struct bpf_sock_tuple *tuple,
					 __u32 tuple__sz, struct bpf_ct_opts___fl *opts,
					 __u32 opts__sz) __ksym __weak;
extern void bpf_ct_release(struct nf_conn *ct) __ksym __weak;
/* Weak: on a kernel without them the loader poisons the calls, which
 * xlat_on 0 leaves unreachable; the agent sets xlat_on only when the
 * kernel's BTF has bpf_skb_ct_lookup (internal/agent/feature/xlat). */

static __always_inline int is_v4mapped(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a; /* 4-byte aligned in flow_key */
	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff);
}

/* xlat_addr writes a conntrack address in the key's format. */
static __always_inline void xlat_addr(__u8 *dst, const union nf_inet_addr *a, int v4)
{
	if (v4) {
		v4mapped(dst, a->ip);
	} else {
		__u32 w[4] = {a->all[0], a->all[1], a->all[2], a->all[3]};
		__builtin_memcpy(dst, w, 16);
	}
}

/*
 * Counting a translated packet once (docs/design/counting.md, "Translated
 * packets"). A packet observed before NAT and again after it has two keys;
 * the flow is keyed on conntrack's tuple of the packet's direction
 * (tuplehash[dir].tuple: the packet before NAT), and its form after NAT is
 * in the xlat fields. A hook that sees the packet after NAT (the node's
 * egress toward the backend; a host-network client's egress after an
 * OUTPUT DNAT; the un-DNATed reply toward the client) misses its own tuple
 * T in the flow map, and conntrack finds the connection by reverse(T), the
 * other direction's tuple. xlat_redirect then files the packet under the
 * canonical key, so every hook of its way, before and after NAT, meets the
 * same flow entry, and the counting rule counts it once.
 *
 * Hooks in another namespace (the backend pod's own veth, whose conntrack
 * knows no NAT) cannot ask conntrack: xlat_alias maps T to the canonical
 * key, written by the hook that asked. Only hooks after the NAT follow an
 * alias: the NAT namespace's egress, other namespaces' ingress. An ingress
 * of the NAT namespace that meets one deletes it: NAT runs after TC
 * ingress, so there T is a packet before NAT, of a connection of its own
 * (the translated one is gone). And an alias is believed only while it is
 * fresh: "gen" is the generation in which conntrack last confirmed it. A
 * hook of the namespace that confirmed it asks again at its first use in
 * a later generation (and deletes it when the connection is gone); a hook
 * of another namespace believes it in that generation and the next (a
 * packet in flight across the flip), and deletes it after.
 */
/* struct xlat_alias_value (bpf/types.h), map xlat_alias (bpf/maps.h). */

/* xlat_tuple writes key k's tuple (reversed when rev) for bpf_skb_ct_lookup
 * and returns its size. */
static __always_inline __u32 xlat_tuple(struct bpf_sock_tuple *t, const struct flow_key *k, int v4, int rev)
{
	const __u8 *s = rev ? k->dst_ip : k->src_ip, *d = rev ? k->src_ip : k->dst_ip;
	__u16 sp = rev ? k->dst_port : k->src_port, dp = rev ? k->src_port : k->dst_port;
	if (v4) {
		t->ipv4.saddr = *(const __u32 *)&s[12];
		t->ipv4.daddr = *(const __u32 *)&d[12];
		t->ipv4.sport = bpf_htons(sp);
		t->ipv4.dport = bpf_htons(dp);
		return sizeof(t->ipv4);
	}
	__builtin_memcpy(t->ipv6.saddr, s, 16);
	__builtin_memcpy(t->ipv6.daddr, d, 16);
	t->ipv6.sport = bpf_htons(sp);
	t->ipv6.dport = bpf_htons(dp);
	return sizeof(t->ipv6);
}

/* same_key compares two keys as five words (no memcmp in BPF); both are
 * 8-byte aligned (struct pkt's key, struct xlat_alias_value). */
static __always_inline int same_key(const struct flow_key *a, const struct flow_key *b)
{
	_Static_assert(sizeof(struct flow_key) == 40, "flow_key is five words");
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4])) == 0;
}

/*
 * xlat_redirect runs when key *k (a packet's, T) is not in the active
 * flow map: when T is a tuple after NAT, it rewrites *k to the canonical
 * key (the packet before NAT) and returns 1; else 0. An alias of
 * xlat_alias first (one hash lookup), then
 * conntrack: reverse(T) found in a connection NAT rewrote means T is
 * the packet after NAT, the connection's other tuple is its form before;
 * the alias is written for the hooks after this one, and the flow's
 * enrichment entry gets the translation (the counting hook may be in a
 * namespace whose conntrack knows none). The caller then writes the
 * alias into the flow map as well (xlat_alias_put), where the later
 * packets of the generation find it with their own lookup. A global
 * function, verified once (not at each of record()'s call sites); it
 * runs on a flow map miss only: once per new flow, once per post-NAT
 * tuple and generation, and per packet only when the flow map is full.
 */
__noinline int xlat_redirect(struct __sk_buff *skb, struct flow_key *k, __u64 netns, __u32 gen, __u32 dir)
{
	if (!xlat_on || !k || (k->proto != IPPROTO_TCP && k->proto != IPPROTO_UDP))
		return 0;
	struct xlat_alias_value *a = bpf_map_lookup_elem(&xlat_alias, k);
	if (a) {
		int here = a->netns == netns;
		if (here && dir == DIR_INGRESS) {
			/* NAT runs after TC ingress: a packet at an ingress of the
			 * namespace of the NAT is before it, so a connection of
			 * its own has this tuple now. The alias is stale. */
			bpf_map_delete_elem(&xlat_alias, k);
			return 0;
		}
		if (!here && dir != DIR_INGRESS)
			return 0; /* a packet's way leaves the NAT to another namespace's ingress */
		if (a->gen == gen || (!here && a->gen + 1 == gen)) {
			*k = a->key;
			return 1;
		}
		if (!here) {
			/* Not confirmed in this generation or the last: stale. */
			bpf_map_delete_elem(&xlat_alias, k);
			return 0;
		}
		/* Here, where conntrack confirmed it: ask again. */
	} else if (dir == DIR_INGRESS) {
		/* After NAT, where conntrack knows it, is an egress. */
		return 0;
	}
	struct bpf_sock_tuple t = {};
	int v4 = is_v4mapped(k->src_ip);
	__u32 tsz = xlat_tuple(&t, k, v4, 1);
	struct bpf_ct_opts___fl o = {.netns_id = -1, .l4proto = k->proto};
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, &t, tsz, &o, sizeof(o));
	if (!ct) {
		if (a)
			bpf_map_delete_elem(&xlat_alias, k);
		return 0;
	}
	int done = 0;
	if (ct->status & (IPS_SRC_NAT_ | IPS_DST_NAT_)) {
		/* reverse(T) is the tuple of direction o.dir: the packet goes
		 * the other way, and that direction's tuple is its form before
		 * NAT. */
		const struct nf_conntrack_tuple *pre = o.dir == IP_CT_DIR_REPLY_ ? &ct->tuplehash[0].tuple :
										&ct->tuplehash[1].tuple;
		struct xlat_alias_value n = {.netns = netns, .gen = gen};
		xlat_addr(n.key.src_ip, &pre->src.u3, v4);
		xlat_addr(n.key.dst_ip, &pre->dst.u3, v4);
		n.key.src_port = bpf_ntohs(pre->src.u.all);
		n.key.dst_port = bpf_ntohs(pre->dst.u.all);
		n.key.proto = k->proto;
		n.key.zone = k->zone; /* NAT rewrites in one namespace: one zone (bpf/zone.h) */
		if (!same_key(&n.key, k)) {
			bpf_map_update_elem(&xlat_alias, k, &n, BPF_ANY);
			struct enrich_value *e = enrich_entry(&n.key, gen);
			if (e) {
				__builtin_memcpy(e->xlat_src, k->src_ip, 16);
				__builtin_memcpy(e->xlat_dst, k->dst_ip, 16);
				e->xlat_sport = k->src_port;
				e->xlat_dport = k->dst_port;
				e->xlat_zone = bpf_core_field_exists(ct->zone) ? ct->zone.id : 0;
				e->xlat = 1;
			}
			*k = n.key;
			done = 1;
		}
	}
	bpf_ct_release(ct);
	if (!done && a)
		bpf_map_delete_elem(&xlat_alias, k);
	return done;
}

/*
 * The alias in the flow map (struct xlat_flow_alias, FLOW_F_XLAT_ALIAS):
 * xlat_redirect's answer for tuple T, kept in the active flow map under T
 * for the rest of the generation, so that a post-NAT packet's own lookup
 * finds it: a listed hook after NAT stops there (steady, on the hooks
 * the alias mirrors: no lookup more than a flow of its own), the flow's
 * counting hook counts there after its first packets (xlat_delegate: no
 * lookup more either; xlat_handover takes it back when another hook
 * takes the counting over), any other packet follows it to its flow (one
 * lookup more). The map is per generation, so the alias ends with it;
 * the next one asks xlat_redirect again.
 */
_Static_assert(sizeof(struct xlat_flow_alias) == sizeof(struct flow_value), "an alias is a flow map value");
_Static_assert(__builtin_offsetof(struct xlat_flow_alias, listed_only) ==
			       __builtin_offsetof(struct flow_value, listed_only) &&
		       __builtin_offsetof(struct xlat_flow_alias, n_ifaces) ==
			       __builtin_offsetof(struct flow_value, n_ifaces) &&
		       __builtin_offsetof(struct xlat_flow_alias, flags) == __builtin_offsetof(struct flow_value, flags) &&
		       __builtin_offsetof(struct xlat_flow_alias, ifaces) == __builtin_offsetof(struct flow_value, ifaces),
	       "an alias's header and first interfaces are a flow value's");
#define XLAT_ALIAS_IFACES 3

/* xlat_alias_put copies xlat_redirect's alias of tuple post, when
 * conntrack confirmed it in this generation, into the active flow map
 * (not when that is known full: the packets after NAT then go through
 * xlat_redirect, as they did before aliases lived there; nor an alias
 * believed from the last generation: a packet in flight across the flip
 * follows it there, the next ones do the same). */
static __noinline void xlat_alias_put(void *cur, const struct flow_key *post, __u32 gen)
{
	const struct xlat_alias_value *to = bpf_map_lookup_elem(&xlat_alias, post);
	if (!to || to->gen != gen || full_known(CTL_FLOWS_FULL, gen))
		return;
	/* Built in this CPU's buffer, zeroed, not on the stack (bpf/build.h). */
	struct xlat_flow_alias *a = (struct xlat_flow_alias *)flow_build_value();
	if (!a)
		return;
	a->listed_only = 1;
	a->n_ifaces = 1;
	a->flags = FLOW_F_XLAT_ALIAS;
	a->to = *to;
	long err = bpf_map_update_elem(cur, post, a, BPF_NOEXIST);
	if (err == 0) {
		__u32 idx = CNT_NEW_FLOWS; /* an entry of the map: its fill */
		__u64 *c = bpf_map_lookup_elem(&counters, &idx);
		if (c)
			*c += 1;
	} else if (err != -17 /* EEXIST: another CPU's */) {
		full_note(CTL_FLOWS_FULL, gen, err);
	}
}

/* xlat_kill marks an alias stale: its tuple is now a connection of its
 * own, whose packets go through the ring for the rest of the generation
 * (the alias holds its key's entry); no hook stops at it or counts in it
 * any more (what it counted while delegated stays, for the evictor). */
static __always_inline void xlat_kill(struct flow_value *v)
{
	bpf_spin_lock(&v->lock);
	v->flags |= FLOW_F_XLAT_DEAD;
	v->listed_only = 1;
	v->first_dir = 0;
	__builtin_memset(&v->ifaces[0], 0, sizeof(v->ifaces[0]));
	bpf_spin_unlock(&v->lock);
}

/*
 * The note: a flow map entry under its flow's key with icmp_type and
 * icmp_code XLAT_NOTE (no TCP or UDP packet has them: the parser writes
 * them only for ICMP), shaped as a dead alias that names, in "to", the
 * alias a delegation made count for the flow (docs/design/counting.md,
 * "The alias in the flow map"). A hand-over in the flow finds that alias
 * through it (xlat_handover). No record: an alias with no packets
 * (internal/agent/evictor/xlat.go); one per delegated flow and generation.
 */
#define XLAT_NOTE 0xff

static __always_inline void xlat_note_key(struct flow_key *n, const struct flow_key *k)
{
	*n = *k;
	n->icmp_type = XLAT_NOTE;
	n->icmp_code = XLAT_NOTE;
}

/* xlat_note writes flow k's note naming alias t (tuple T) unless it
 * exists; 1 when the note names t. */
static __noinline int xlat_note(void *cur, const struct flow_key *k, const struct flow_key *t, __u32 gen)
{
	struct flow_key n;
	xlat_note_key(&n, k);
	/* Built in this CPU's buffer, zeroed, not on this frame, the
	 * deepest of the TC programs' stack chain (bpf/build.h). */
	struct xlat_flow_alias *a = (struct xlat_flow_alias *)flow_build_value();
	if (!a)
		return 0;
	a->listed_only = 1;
	a->flags = FLOW_F_XLAT_ALIAS | FLOW_F_XLAT_DONE | FLOW_F_XLAT_DEAD;
	a->to.key = *t;
	a->to.gen = gen;
	long err = full_known(CTL_FLOWS_FULL, gen) ? -E2BIG_ : bpf_map_update_elem(cur, &n, a, BPF_NOEXIST);
	if (err == 0) {
		__u32 idx = CNT_NEW_FLOWS; /* an entry of the map: its fill */
		__u64 *c = bpf_map_lookup_elem(&counters, &idx);
		if (c)
			*c += 1;
		return 1;
	}
	if (err != -17 /* EEXIST */) {
		full_note(CTL_FLOWS_FULL, gen, err);
		return 0;
	}
	const struct xlat_flow_alias *e = bpf_map_lookup_elem(cur, &n);
	return e && same_key(&e->to.key, t);
}

/*
 * xlat_delegate runs when hook *me's packet after NAT, which followed
 * alias a to flow v, is counted at v's counting observation (me is it):
 * it decides whether the alias counts the hook's next packets itself, so
 * that they cost one lookup, as a flow's own do (docs/design/counting.md,
 * "The alias in the flow map"). "may": the hook is certainly first (a
 * host-network client's egress after an OUTPUT DNAT, whose packets count
 * there whatever v's state), or v's note names the alias (xlat_note), so
 * that a hand-over can take the delegation back (xlat_handover). Under v's
 * lock, the hook must still be v's counting observation and v not yet
 * FLOW_F_XLAT_VIA (set by the one delegation of the generation, or by a
 * hand-over, after which none may start); v then gets FLOW_F_XLAT_VIA,
 * which tells the evictor to add the alias's counts to v's record. Then,
 * under the alias's lock, once per alias and generation
 * (FLOW_F_XLAT_DONE, which xlat_handover sets too): the alias takes the
 * hook as its ifaces[0], counting (listed_only bit 0 clear), and v's rule.
 * This packet is counted in v (so v's packets say it counted, for the
 * next generation's inheritance).
 */
static __noinline void xlat_delegate(struct flow_value *a, struct flow_value *v, const struct iface_obs *me,
				     int may)
{
	int ok = may;
	bpf_spin_lock(&v->lock);
	ok = ok && v->ifaces[0].ifindex == me->ifindex && v->ifaces[0].netns == me->netns && v->first_dir == me->dir && !(v->listed_only & 1) &&
	     !(v->flags & FLOW_F_XLAT_VIA);
	int lost = !ok && (v->flags & FLOW_F_XLAT_VIA); /* another CPU's delegation, or a hand-over */
	if (ok)
		v->flags |= FLOW_F_XLAT_VIA;
	__u8 rule = v->rule;
	bpf_spin_unlock(&v->lock);
	if (lost)
		return; /* the winner (or the hand-over) decides the alias */
	bpf_spin_lock(&a->lock);
	if (!(a->flags & (FLOW_F_XLAT_DONE | FLOW_F_XLAT_DEAD))) {
		a->flags |= FLOW_F_XLAT_DONE; /* decided: xlat_lookup never runs on an alias */
		if (ok) {
			a->ifaces[0] = *me;
			a->first_dir = me->dir;
			a->rule = rule;
			/* Last: fast() needs ifaces[0] and first_dir as well. */
			a->listed_only &= ~1;
		}
	}
	bpf_spin_unlock(&a->lock);
}

/*
 * xlat_handover runs in slow() before a certainly-first hook counts a
 * packet of flow v (key *k) and takes its counting over: it marks v
 * FLOW_F_XLAT_VIA, so that no delegation starts from now on (xlat_delegate
 * checks it under the same lock), and when v was marked already, a
 * delegation may have made an alias count at v's former counting hook h:
 * it takes it back, through v's note, before the take-over is visible in
 * v (the caller's locked section, after this returns). So no packet
 * counted at the new hook, on this CPU or on one that then counts in v's
 * fast path, finds the alias counting at h when it gets there: it follows
 * the alias to v, where h is listed. What the alias counted stays, for
 * the evictor. Two spin locks one after the other (never nested: the
 * verifier allows one), only on a hand-over.
 */
static __noinline void xlat_handover(struct flow_value *v, const struct flow_key *k, __u32 gen)
{
	bpf_spin_lock(&v->lock);
	int via = v->flags & FLOW_F_XLAT_VIA;
	v->flags |= FLOW_F_XLAT_VIA;
	bpf_spin_unlock(&v->lock);
	if (!via)
		return;
	void *cur = gen & 1 ? (void *)&flows_b : (void *)&flows_a;
	struct flow_key n;
	xlat_note_key(&n, k);
	const struct xlat_flow_alias *note = bpf_map_lookup_elem(cur, &n);
	if (!note)
		return; /* none: no delegation, or a certainly-first hook's */
	struct flow_value *a = bpf_map_lookup_elem(cur, &note->to.key);
	if (!a || !(a->flags & FLOW_F_XLAT_ALIAS))
		return;
	bpf_spin_lock(&a->lock);
	a->flags |= FLOW_F_XLAT_DONE; /* and never again this generation */
	a->listed_only |= 1;
	a->first_dir = 0;
	__builtin_memset(&a->ifaces[0], 0, sizeof(a->ifaces[0]));
	bpf_spin_unlock(&a->lock);
}

/* xlat_own_key: a packet counted at an alias that counts for its flow
 * (xlat_delegate) but split off it (another sampling rate, bpf/flows.h)
 * is its flow's: *k, the alias's tuple, becomes the flow's key. Only on
 * that rare path. */
static __noinline void xlat_own_key(struct flow_key *k, __u32 gen)
{
	const struct flow_value *v = bpf_map_lookup_elem(gen & 1 ? (void *)&flows_b : (void *)&flows_a, k);
	if (v && (v->flags & FLOW_F_XLAT_ALIAS) && !(v->listed_only & 1))
		*k = ((const struct xlat_flow_alias *)v)->to.key;
}

/*
 * xlat_follow decides whether this hook's packet, whose tuple *k is an
 * alias's (v), is the packet after NAT of the alias's flow: then it
 * writes the flow's key to *k and returns 1. The rule is xlat_redirect's:
 * only hooks after the NAT follow (the NAT namespace's egress, another
 * namespace's ingress); an ingress of the NAT namespace proves it stale
 * (NAT runs after TC ingress: there the tuple is a packet before NAT, of
 * a connection of its own). Its freshness needs no test: the alias is
 * in the flow map only in a generation in which conntrack confirmed it
 * (record puts it there only then). 0: the packet is a flow of its own
 * under *k (the caller sends it through the ring: the alias holds its
 * key's entry).
 */
static __noinline int xlat_follow(struct flow_value *v, struct flow_key *k, const struct iface_obs *me)
{
	struct xlat_flow_alias *a = (struct xlat_flow_alias *)v;
	if (v->flags & FLOW_F_XLAT_DEAD)
		return 0;
	int here = a->to.netns == me->netns;
	if (here && me->dir == DIR_INGRESS) {
		xlat_kill(v);
		bpf_map_delete_elem(&xlat_alias, k);
		return 0;
	}
	if (!here && me->dir != DIR_INGRESS)
		return 0;
	*k = a->to.key;
	return 1;
}

/* xlat_mirror lists hook *me in alias v, once the alias's flow lists it
 * as steady (known not first: for the rest of the generation, bpf/flows.h
 * steady): its next packets stop at the alias. At most two hooks. */
static __noinline void xlat_mirror(struct flow_value *v, const struct iface_obs *me)
{
	bpf_spin_lock(&v->lock);
	__u8 n = v->n_ifaces;
	int have = (n > 1 && v->ifaces[1].ifindex == me->ifindex && v->ifaces[1].netns == me->netns) ||
		   (n > 2 && v->ifaces[2].ifindex == me->ifindex && v->ifaces[2].netns == me->netns);
	if (!have && !(v->flags & FLOW_F_XLAT_DEAD)) {
		if (n == 1) {
			v->ifaces[1] = *me;
			v->listed_only |= 1 << 1;
			v->n_ifaces = 2;
		} else if (n == 2) {
			v->ifaces[2] = *me;
			v->listed_only |= 1 << 2;
			v->n_ifaces = 3;
		}
	}
	bpf_spin_unlock(&v->lock);
}

/*
 * xlat_lookup asks conntrack about the packet's flow and records a NAT
 * translation in the flow's enrichment entry. Returns 1 when conntrack
 * knows the flow (translated or not), so it need not be asked again this
 * generation; 0 when it does not (yet).
 */
__noinline int xlat_lookup(struct __sk_buff *skb, const struct flow_key *k)
{
	if (!xlat_on || !k)
		return 0;
	if (k->proto != IPPROTO_TCP && k->proto != IPPROTO_UDP)
		return 1;
	struct bpf_sock_tuple t = {};
	int v4 = is_v4mapped(k->src_ip);
	__u32 tsz = xlat_tuple(&t, k, v4, 0);
	struct bpf_ct_opts___fl o = {.netns_id = -1, .l4proto = k->proto};
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, &t, tsz, &o, sizeof(o));
	if (!ct)
		return 0;
	if (ct->status & (IPS_SRC_NAT_ | IPS_DST_NAT_)) {
		/* The other direction's tuple, reversed: the packet after NAT. */
		/* Constant indexes: CO-RE relocates a field path, not the
		 * stride of an array indexed at run time. */
		const struct nf_conntrack_tuple *other = o.dir == IP_CT_DIR_REPLY_ ?
								 &ct->tuplehash[0].tuple :
								 &ct->tuplehash[1].tuple;
		struct enrich_value *e = enrich_entry(k, generation());
		if (e) {
			xlat_addr(e->xlat_src, &other->dst.u3, v4);
			xlat_addr(e->xlat_dst, &other->src.u3, v4);
			e->xlat_sport = bpf_ntohs(other->dst.u.all);
			e->xlat_dport = bpf_ntohs(other->src.u.all);
			e->xlat_zone = bpf_core_field_exists(ct->zone) ? ct->zone.id : 0;
			e->xlat = 1;
		}
	}
	bpf_ct_release(ct);
	return 1;
}

#endif
