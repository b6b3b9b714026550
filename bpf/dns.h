/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "dns": DNS messages per flow, read by the TC programs from UDP and
 * TCP packets to or from the DNS ports (dns_ports, --dns-ports): the
 * transaction id, the flags (and so the response code), the question's name
 * (its first 64 bytes as on the wire), and the latency from a query's first
 * sighting to its answer's, matched by the query's flow and id in the
 * hash map dns_pending. The query's flow gets the query, then its answer's
 * latency and flags; the answer's flow gets the answer. A query never
 * answered stays in dns_pending until the agent reports its timeout
 * (feature.Sweeper: the Go side's Sweep). Go side:
 * internal/agent/feature/dns; docs/dns.md.
 *
 * Answers are also handed to the agent whole (their first 512 bytes, ring
 * dns_answers), which maps the addresses they give to the question's name
 * for the flow records (src_dns_name, dst_dns_name).
 *
 * Cost: packets to or from other ports pay a port compare, while the
 * feature is on; off (dns_on 0) nothing is compiled in.
 */
#ifndef FLOWLENS_DNS_H
#define FLOWLENS_DNS_H

#include "enrich.h"
#include "parse.h"
#include "xlatkey.h"

volatile const __u32 dns_on = 0;
/* Hand each answer to the agent (ring dns_answers), which maps the A and
 * AAAA records' addresses to the question's name (--dns-names-cache-size;
 * 0: off). */
volatile const __u32 dns_answers_on = 0;
volatile const __u16 dns_ports[4] = {53, 0, 0, 0}; /* 0: unused */

#define DNS_QR 0x8000
#define DNS_NAME_MAX 64
#define DNS_EEXIST 17 /* EEXIST: another CPU inserted the same query first */
#define DNS_ANSWER_MAX 512 /* bytes of an answer handed on: the classic UDP message */

/* An answer for the agent (ring dns_answers): its first len bytes, from
 * the DNS header (a TCP message without its length prefix). */
struct dns_answer {
	__u32 len;
	__u8 msg[DNS_ANSWER_MAX];
};

struct dns_hdr {
	__be16 id;
	__be16 flags;
	__be16 qdcount, ancount, nscount, arcount;
};

static __always_inline int dns_port(__u16 p)
{
	return p == dns_ports[0] || (dns_ports[1] && p == dns_ports[1]) ||
	       (dns_ports[2] && p == dns_ports[2]) || (dns_ports[3] && p == dns_ports[3]);
}

/*
 * Across a Service's NAT (feature "xlat") a DNS message is a message of a
 * flow whose key before NAT has a listed port, whatever its own tuple's.
 * A Service port other than its pods' (OpenShift's 53 -> 5353) with only
 * the Service's listed: a host-network client's query is seen only after
 * DNAT (5353) and its answer only before un-DNAT. The key before NAT is
 * known per packet only after record() and not at every hook (a hook that
 * stops at an alias keeps the packet's own tuple), so the programs learn
 * the ports behind a listed one: a packet whose own ports are not listed
 * and whose key record() moved to a listed port (its first packets at a
 * hook after NAT, xlat_redirect or xlat_via) puts its own port here
 * (dns_learn). A packet to or from a learned port is then read when its
 * flow's key before NAT has a listed port (dns_inspect checks; a query's
 * key, or for an answer the query's alias, xlat_alias), else left alone:
 * a learned port costs those packets a lookup, never a record. Per set of
 * programs (.bss), never forgotten; 0: a free slot, filled in order.
 */
#define DNS_NAT_PORTS 4
__u16 dns_nat_ports[DNS_NAT_PORTS];

/* dns_nat_ports_of: is port a or b a learned one? Slots fill in order,
 * so the test stops at the first free one: with one port learned (a
 * Service's DNS mapping), two compares and one load more. */
static __always_inline int dns_nat_ports_of(__u16 a, __u16 b)
{
	for (int i = 0; i < DNS_NAT_PORTS; i++) {
		__u16 l = dns_nat_ports[i];
		if (!l)
			return 0;
		if (a == l || b == l)
			return 1;
	}
	return 0;
}

/* dns_mark is struct pkt's dns: 2, never 0 (bpf/flows.h); | 1: read it;
 * | 4: by a learned port only, its key before NAT to be checked; | 8:
 * with xlat, on no listed or learned port, to be tested again after
 * record() (dns_after_record). Each load of a load-time constant stays in
 * the program (the verifier removes only the branches), so xlat_on is
 * read once here and the bits carry it. */
static __always_inline __u8 dns_mark(const struct pkt *p)
{
	__u8 x = xlat_on ? 8 : 0;
	if (!p->payload)
		return 2 | x;
	if (dns_port(p->key.dst_port) || dns_port(p->key.src_port))
		return 3;
	/* Nothing learned (no Service port mapped): one load. */
	if (x && dns_nat_ports_of(p->key.dst_port, p->key.src_port))
		return 7;
	return 2 | x;
}

/* dns_learn adds a port behind a listed one (once; the slots' races
 * between CPUs at worst lose one, learned again at its next first packet). */
static __always_inline void dns_learn(__u16 port)
{
	for (int i = 0; i < DNS_NAT_PORTS; i++) {
		__u16 l = dns_nat_ports[i];
		if (l == port)
			return;
		if (!l) {
			dns_nat_ports[i] = port;
			return;
		}
	}
}

/* dns_learn_from learns the packet's own port (dst: its destination's,
 * else its source's), read again from its L4 header: p->key is its flow's
 * key before NAT now. Then the packet is read (dns 3) if it has a
 * payload. Once per tuple after NAT, hook and generation. */
static __noinline void dns_learn_from(struct __sk_buff *skb, struct pkt *p, int dst)
{
	if (!skb || !p)
		return;
	__u32 off = p->key.proto == IPPROTO_TCP ? p->l4 : (__u32)p->payload - 8;
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)))
		return;
	dns_learn(bpf_ntohs(dst ? ports[1] : ports[0]));
	if (p->payload)
		p->dns = 3;
}

/* dns_after_record: a packet on no listed or learned port (dns & 8) whose
 * key record() moved to one with a listed port (its key before NAT: the
 * first packets of a tuple after NAT at a hook; a TCP SYN too, without a
 * payload: after it, a host-network client's egress counts in the alias
 * and keeps the packets' own tuple). */
static __always_inline void dns_after_record(struct __sk_buff *skb, struct pkt *p)
{
	if (dns_port(p->key.dst_port))
		dns_learn_from(skb, p, 1);
	else if (dns_port(p->key.src_port))
		dns_learn_from(skb, p, 0);
}

/* dns_name copies the question's name (at off) into e->dns_name. */
static __always_inline void dns_name(struct __sk_buff *skb, __u32 off, struct enrich_value *e)
{
	__builtin_memset(e->dns_name, 0, DNS_NAME_MAX);
	if (skb->len <= off)
		return;
	/* 64-bit and clamped both ways: the verifier needs 1 <= n <= 64. */
	__u64 n = (__u64)skb->len - off;
	if (n > DNS_NAME_MAX)
		n = DNS_NAME_MAX;
	if (n < 1)
		return;
	bpf_skb_load_bytes(skb, off, e->dns_name, n);
}

/* dns_counts says whether this hook is where the query's packet is counted
 * (its flow's counting observation in the active generation, or, the flow
 * having no entry there yet, the first hook to see it), so that a query that
 * finds dns_pending full is counted once however many hooks it crosses.
 * Only on that rare path. */
static __always_inline int dns_counts(const struct flow_key *k, const struct iface_obs *me, __u32 gen)
{
	const struct flow_value *v = bpf_map_lookup_elem(gen & 1 ? (void *)&flows_b : (void *)&flows_a, k);
	return !v || (v->ifaces[0].ifindex == me->ifindex && v->ifaces[0].netns == me->netns &&
		      v->first_dir == me->dir);
}

/* dns_hand_on puts the answer at off on ring dns_answers, counting it lost
 * when the ring is full. Only at the answer's counting hook (dns_counts),
 * so that an answer crossing several hooks is handed on once. */
static __always_inline void dns_hand_on(struct __sk_buff *skb, __u32 off, const struct flow_key *k,
					const struct iface_obs *me, __u32 gen)
{
	if (skb->len <= off || !dns_counts(k, me, gen))
		return;
	struct dns_answer *a = bpf_ringbuf_reserve(&dns_answers, sizeof(*a), 0);
	if (!a) {
		__u32 idx = ENRICH_DNS_ANSWERS_LOST;
		__u64 *lost = bpf_map_lookup_elem(&enrich_counters, &idx);
		if (lost)
			*lost += 1; /* per-CPU: no other writer */
		return;
	}
	/* 64-bit and clamped both ways: the verifier needs 1 <= n <= max. */
	__u64 n = (__u64)skb->len - off;
	if (n > DNS_ANSWER_MAX)
		n = DNS_ANSWER_MAX;
	if (n < 1 || bpf_skb_load_bytes(skb, off, a->msg, n)) {
		bpf_ringbuf_discard(a, 0);
		return;
	}
	a->len = n;
	bpf_ringbuf_submit(a, BPF_RB_NO_WAKEUP); /* read at each eviction, never awaited */
}

/* dns_nat_answer says whether the answer of key k (before un-DNAT) answers
 * a query whose key before NAT has a listed port: k's reverse is that
 * query's tuple after DNAT, an alias of xlat_alias (bpf/xlatkey.h). */
static __noinline int dns_nat_answer(const struct flow_key *k)
{
	if (!k)
		return 0;
	struct flow_key q = {};
	__builtin_memcpy(q.src_ip, k->dst_ip, 16);
	__builtin_memcpy(q.dst_ip, k->src_ip, 16);
	q.src_port = k->dst_port;
	q.dst_port = k->src_port;
	q.proto = k->proto;
	q.zone = k->zone;
	if (!xlat_query_key(&q))
		return 0;
	return dns_port(q.dst_port) || dns_port(q.src_port);
}

/* dns_inspect reads a DNS message at the start of the packet's payload,
 * after record(): under its flow's key before NAT (bpf/xlatkey.h). */
static __noinline void dns_inspect(struct __sk_buff *skb, const struct pkt *p, const struct iface_obs *me)
{
	__u32 off = p->payload + (p->key.proto == IPPROTO_TCP ? 2 : 0); /* TCP: a length first */
	struct dns_hdr h;
	if (bpf_skb_load_bytes(skb, off, &h, sizeof(h)))
		return;
	__u16 id = bpf_ntohs(h.id), flags = bpf_ntohs(h.flags);
	__u32 name = h.qdcount ? off + sizeof(h) : 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 gen = generation();
	const struct flow_key *k = &p->key;
	struct flow_key key;
	if (xlat_on) { /* the copy too: nothing without xlat */
		key = p->key;
		xlat_inspect_key(&key, me, gen);
		k = &key;
	}
	/* Read by a learned port only (dns_mark): its flow's key before NAT
	 * must have a listed port, or, for an answer, its query's. */
	int unlisted = xlat_on && (p->dns & 4) && !dns_port(k->dst_port) && !dns_port(k->src_port);
	struct dns_pending_key pk = {.id = id};
	struct enrich_value *e;
	if (!(flags & DNS_QR)) { /* a query: its first sighting starts the clock */
		if (unlisted)
			return;
		pk.key = *k;
		/* Look first: a query is seen again at every later hook (and on
		 * a retransmission), and only its first sighting is its time. */
		struct dns_pending_value *pv = bpf_map_lookup_elem(&dns_pending, &pk);
		int fresh = 0;
		if (!pv) {
			/* The zero value from a map, not the stack (80 bytes; the
			 * TC programs' call chains have 512 for all their frames). */
			__u32 zero = 0;
			const struct enrich_value *zv = bpf_map_lookup_elem(&enrich_zero, &zero);
			long err = zv ? bpf_map_update_elem(&dns_pending, &pk, zv, BPF_NOEXIST) : -1;
			if (!err) {
				pv = bpf_map_lookup_elem(&dns_pending, &pk);
				fresh = pv != 0;
			} else if (err != -DNS_EEXIST && dns_counts(k, me, gen)) { /* full: counted, never silent */
				__u32 idx = ENRICH_DNS_FULL;
				__u64 *full = bpf_map_lookup_elem(&enrich_counters, &idx);
				if (full)
					*full += 1; /* per-CPU: no other writer */
			}
		}
		if (fresh) {
			pv->flags = flags;
			pv->query_ns = now; /* last: 0 says "being written" to the agent */
		}
		e = enrich_entry(k, gen);
		if (!e)
			return;
		e->dns_id = id;
		e->dns_flags = flags;
		if (!e->dns_query_ns)
			e->dns_query_ns = now;
		e->dns_state |= DNS_S_QUERY;
		if (name) {
			dns_name(skb, name, e);
			if (fresh)
				__builtin_memcpy(pv->name, e->dns_name, DNS_NAME_MAX);
		}
		return;
	}
	/* An answer, on its own flow. */
	if (unlisted && !dns_nat_answer(k))
		return;
	if (dns_answers_on)
		dns_hand_on(skb, off, k, me, gen);
	e = enrich_entry(k, gen);
	if (e) {
		e->dns_id = id;
		e->dns_flags = flags;
		e->dns_state |= DNS_S_ANSWER;
		if (name)
			dns_name(skb, name, e);
	}
	/* Its query's flow: the reverse of this one. */
	__builtin_memcpy(pk.key.src_ip, k->dst_ip, 16);
	__builtin_memcpy(pk.key.dst_ip, k->src_ip, 16);
	pk.key.src_port = k->dst_port;
	pk.key.dst_port = k->src_port;
	pk.key.proto = k->proto;
	pk.key.zone = k->zone; /* a loopback query and its answer share a namespace */
	struct dns_pending_value *pv = bpf_map_lookup_elem(&dns_pending, &pk);
	/* An answer before un-DNAT (backend -> client): that reverse is its
	 * query after DNAT, whose key before NAT the alias gives. */
	if (!pv && xlat_query_key(&pk.key))
		pv = bpf_map_lookup_elem(&dns_pending, &pk);
	if (!pv)
		return; /* its query was not seen, or was matched or timed out already */
	__u64 ts = pv->query_ns;
	/* The delete is the claim: whoever removes the entry, this answer at
	 * another hook, or the agent reporting the query's timeout, reports
	 * the query, and only it. */
	if (!ts || bpf_map_delete_elem(&dns_pending, &pk))
		return;
	__u64 lat = now - ts;
	e = enrich_entry(&pk.key, gen);
	if (!e)
		return;
	e->dns_latency_ns = lat;
	if (lat > e->dns_latency_max_ns)
		e->dns_latency_max_ns = lat;
	e->dns_flags = flags;
	e->dns_state |= DNS_S_ANSWERED;
}

#endif
