/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "tcp": TCP connection health per flow (docs/tcp.md), what the
 * flow's source did: its role, connects and how they ended, SYN and SYN-ACK
 * retransmissions, resets, zero windows, handshake latency. Go side:
 * internal/agent/feature/tcp.
 *
 * Inside the TC programs, only SYN, RST, FIN and zero-window segments come
 * here (tcp_segment), and only at the hook that counts the packet (its
 * flow's counting observation, bpf/order.h), so each segment is counted
 * once however many hooks it crosses. Every other segment pays one test of
 * flags parse already has (tcp_on 0: nothing is compiled in).
 *
 * A connection's state lives outside the generations, in tcp_conns (maps.h),
 * keyed by the canonical one of its two flows (tcp_canon: one lookup finds
 * it from either), with which side is the client: the first SYN's time and
 * whether it was answered, so that a SYN and its SYN-ACK on both sides of
 * a flip make one connect, and so that the flows of a connection get their
 * role in every period: a flow new in a generation looks its connection up
 * (tcp_new_flow, on the insert path only). A connect ends answered (SYN-ACK:
 * the handshake latency), refused (a RST: the entry is deleted), or
 * abandoned: the client's socket leaves SYN_SENT for CLOSE without an
 * answer (tp_btf/inet_sock_set_state, tcp_state), a timeout; a client
 * whose socket is not on the node (forwarded traffic) is reported by the
 * agent once its SYNs stopped for longer than any retry interval (the Go
 * side's Sweep).
 */
#ifndef FLOWLENS_TCP_H
#define FLOWLENS_TCP_H

#include "enrich.h"
#include "parse.h"
#include "xlatkey.h" /* a reply's connection across NAT */

volatile const __u32 tcp_on = 0;

#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_ACK 0x10
/* The segments tcp_segment looks at (TCP_ZERO_WIN: parse.h's marker). */
#define TCP_SEG_MASK (TH_FIN | TH_SYN | TH_RST | TCP_ZERO_WIN)
#define TCP_EEXIST 17

/* The kernel's TCP states (include/net/tcp_states.h), for the socket hook. */
#define TCP_SYN_SENT_ 2
#define TCP_CLOSE_ 7

/* The local port of a socket that is closing: inet_sport, which stays,
 * where sock_key reads skc_num, which releasing the port (inet_put_port,
 * before the state becomes CLOSE) zeroed. */
struct inet_sock___tcp {
	__be16 inet_sport;
} __attribute__((preserve_access_index));

/* TCP_KEY declares a key on the stack 8-byte aligned: tcp_reverse and
 * tcp_canon copy the addresses 8 bytes at a time (a flow_key is only
 * 2-byte aligned, so memcpy made 2-byte copies: 64 instructions per
 * reverse, a fifth of the TC programs' verification with "tcp" on,
 * docs/benchmarks.md §38), and the verifier wants stack loads aligned.
 * Every key they get is one, or struct pkt's (aligned 8). */
#define TCP_KEY struct flow_key __attribute__((aligned(8)))

static __always_inline void tcp_reverse(struct flow_key *r, const struct flow_key *k)
{
	__u64 *rd = (__u64 *)r;
	const __u64 *kd = (const __u64 *)k;
	rd[0] = kd[2];
	rd[1] = kd[3];
	rd[2] = kd[0];
	rd[3] = kd[1];
	r->src_port = k->dst_port;
	r->dst_port = k->src_port;
	r->proto = k->proto;
	r->icmp_type = 0;
	r->icmp_code = 0;
	r->zone = k->zone; /* both directions of a connection are in one zone */
}

/*
 * tcp_canon sets c to the canonical one of k and its reverse (the one whose
 * source address, then port, is the smaller: any fixed order does), the
 * key of their connection in tcp_conns; returns 1 when that is k itself.
 */
static __always_inline int tcp_canon(struct flow_key *c, const struct flow_key *k)
{
	const __u64 *s = (const __u64 *)k->src_ip, *d = (const __u64 *)k->dst_ip;
	int fwd;
	if (s[0] != d[0])
		fwd = s[0] < d[0];
	else if (s[1] != d[1])
		fwd = s[1] < d[1];
	else
		fwd = k->src_port <= k->dst_port;
	if (fwd) {
		__u64 *cd = (__u64 *)c;
		const __u64 *kd = (const __u64 *)k;
#pragma unroll
		for (int i = 0; i < (int)(sizeof(*k) / 8); i++)
			cd[i] = kd[i];
	} else
		tcp_reverse(c, k);
	return fwd;
}

/* tcp_client_side says whether k, the flow c was found by (fwd: k is the
 * key), is the client's. */
static __always_inline int tcp_client_side(const struct tcp_conn *c, int fwd)
{
	return fwd == !!(c->state & TCP_C_CLIENT_FWD);
}

/* enrich_entry, once out of line: tcp_segment needs up to two entries on
 * its paths, and inlined each would be hundreds of instructions more in
 * every TC program. */
static __noinline struct enrich_value *tcp_entry(const struct flow_key *k, __u32 gen)
{
	return enrich_entry(k, gen);
}

static __always_inline void tcp_set_role(const struct flow_key *k, __u32 gen, __u8 role)
{
	struct enrich_value *e = tcp_entry(k, gen);
	if (e && e->tcp_role != role)
		e->tcp_role = role;
}

/*
 * tcp_new_flow gives a TCP flow new in this generation its role, when the
 * agent knows its connection (tcp_conns): client if it is the connection's
 * key, server if it is the reverse. On the insert path only (once per flow
 * and generation), never per packet.
 */
static __noinline void tcp_new_flow(const struct flow_key *k, __u32 gen)
{
	TCP_KEY ck;
	int fwd = tcp_canon(&ck, k);
	const struct tcp_conn *c = bpf_map_lookup_elem(&tcp_conns, &ck);
	if (c)
		tcp_set_role(k, gen, tcp_client_side(c, fwd) ? TCP_ROLE_CLIENT : TCP_ROLE_SERVER);
}

/* tcp_counts says whether this hook counted the packet: it is its flow's
 * counting observation in the generation (record just ran), or the flow
 * is in no map (it went through the overflow ring). An alias that counts
 * for its flow (feature xlat, bpf/xlat.h xlat_delegate) counted it for
 * that flow: *k becomes the flow's key. */
static __always_inline int tcp_counts(struct flow_key *k, const struct iface_obs *me, __u32 gen)
{
	const struct flow_value *v = bpf_map_lookup_elem(gen & 1 ? (void *)&flows_b : (void *)&flows_a, k);
	int counts = !v || (v->ifaces[0].ifindex == me->ifindex && v->ifaces[0].netns == me->netns &&
			    v->first_dir == me->dir && !(v->listed_only & 1));
	if (counts && v && (v->flags & FLOW_F_XLAT_ALIAS))
		*k = ((const struct xlat_flow_alias *)v)->to.key;
	return counts;
}

/*
 * tcp_syn_dropped keeps, with its pending connect, the drop of a SYN (e:
 * the drop just recorded, feature "drops", bpf/drops.h), for the record of
 * the connect's timeout, which may come periods later, when the flow's
 * entries of the drop's period are gone.
 */
static __always_inline void tcp_syn_dropped(const struct flow_key *k, const struct enrich_value *e)
{
	TCP_KEY ck;
	int fwd = tcp_canon(&ck, k);
	struct tcp_conn *c = bpf_map_lookup_elem(&tcp_conns, &ck);
	if (!c || (c->state & TCP_C_OPEN) || !tcp_client_side(c, fwd))
		return;
	c->drop_cause = e->drop_cause;
	c->drop_tcp_flags = e->drop_tcp_flags;
	c->drop_tcp_state = e->drop_tcp_state;
}

static __always_inline void tcp_add(__u64 *c, __u64 n)
{
	__sync_fetch_and_add(c, n);
}

/* tcp_zero_window counts a zero-window segment of flow k when it is the
 * first to advertise it at this acknowledgement number: a window that
 * closes acknowledges new data, while the answers to the sender's window
 * probes repeat the same number (the kernel's TCPToZeroWindowAdv counts
 * only the closing). */
static __always_inline void tcp_zero_window(struct __sk_buff *skb, const struct pkt *p, struct enrich_value *e)
{
	__be32 ack;
	if (bpf_skb_load_bytes(skb, p->l4 + 8, &ack, 4))
		return;
	__u32 *last = bpf_map_lookup_elem(&tcp_zwin, &p->key);
	if (last && *last == ack)
		return;
	if (last)
		*last = ack;
	else
		bpf_map_update_elem(&tcp_zwin, &p->key, &ack, BPF_ANY);
	tcp_add(&e->tcp_zero_windows, 1);
}

/*
 * tcp_segment reads a SYN, RST, FIN or zero-window segment (seg: its flags
 * among TCP_SEG_MASK) at the hook that counts it. Not inlined: the common
 * path only tests seg.
 */
static __noinline void tcp_segment(struct __sk_buff *skb, const struct pkt *p, const struct iface_obs *me,
				   __u32 gen, __u16 seg)
{
	TCP_KEY fk = p->key;
	const struct flow_key *k = &fk;
	if (!tcp_counts(&fk, me, gen))
		return;
	struct enrich_value *e = tcp_entry(k, gen);
	if (!e)
		return;
	__u64 now = bpf_ktime_get_ns();
	TCP_KEY ck, r;
	int fwd = tcp_canon(&ck, k);
	struct tcp_conn *c = bpf_map_lookup_elem(&tcp_conns, &ck);
	/* Feature "xlat": a reply of a connection NAT rewrote is keyed before
	 * un-NAT (backend -> client), and its reverse is the request after
	 * NAT, whose alias names the request's key before NAT (client ->
	 * Service), the connection's. Its segments then stand for the
	 * reverse of that key, so the connection and the client's entry are
	 * the request's, never a record under the tuple after NAT. Not for a
	 * client's SYN: its own key is the connection's. */
	TCP_KEY kc;
	if (!c && xlat_on && !((seg & TH_SYN) && !(p->tcp_flags & TH_ACK))) {
		tcp_reverse(&r, k);
		if (xlat_query_key(&r)) {
			tcp_reverse(&kc, &r);
			TCP_KEY nck;
			int nfwd = tcp_canon(&nck, &kc);
			struct tcp_conn *nc = bpf_map_lookup_elem(&tcp_conns, &nck);
			if (nc) {
				k = &kc;
				ck = nck;
				fwd = nfwd;
				c = nc;
			}
		}
	}

	if (seg & TCP_ZERO_WIN)
		tcp_zero_window(skb, p, e);
	if (seg & TH_RST) {
		tcp_add(&e->tcp_resets, 1);
		/* The end of the connection, whichever side resets. A RST of
		 * the server that answers a pending SYN refuses its connect:
		 * the delete is the claim (against the socket hook's timeout
		 * and the agent's sweep). */
		if (!c)
			return;
		int refused = !(c->state & TCP_C_OPEN) && !tcp_client_side(c, fwd);
		if (!bpf_map_delete_elem(&tcp_conns, &ck) && refused) {
			tcp_reverse(&r, k);
			struct enrich_value *ce = tcp_entry(&r, gen);
			if (ce)
				tcp_add(&ce->tcp_refused, 1);
		}
		return;
	}
	if ((seg & TH_SYN) && !(p->tcp_flags & TH_ACK)) {
		/* A SYN: the client's flow is k. */
		if (e->tcp_role != TCP_ROLE_CLIENT)
			e->tcp_role = TCP_ROLE_CLIENT;
		if (c && !(c->state & TCP_C_FIN) && tcp_client_side(c, fwd)) {
			/* Not answered yet, or answered and the SYN-ACK lost
			 * after this hook: sent again. */
			tcp_add(&e->tcp_syn_retrans, 1);
			if (!(c->state & TCP_C_OPEN))
				c->last_ns = now;
			return;
		}
		/* A new connection (or one on the tuple of an ended one). */
		struct tcp_conn n = {.syn_ns = now, .last_ns = now, .state = fwd ? TCP_C_CLIENT_FWD : 0};
		if (bpf_map_update_elem(&tcp_conns, &ck, &n, c ? BPF_ANY : BPF_NOEXIST))
			return; /* full, or another CPU's copy of it */
		tcp_add(&e->tcp_connects, 1);
		return;
	}
	if (seg & TH_SYN) {
		/* A SYN-ACK: the server's flow is k, the client's r. */
		if (e->tcp_role != TCP_ROLE_SERVER)
			e->tcp_role = TCP_ROLE_SERVER;
		tcp_reverse(&r, k);
		if (!c) {
			/* Its SYN was not seen: the roles are known from here. */
			struct tcp_conn n = {.state = TCP_C_OPEN | (fwd ? 0 : TCP_C_CLIENT_FWD)};
			bpf_map_update_elem(&tcp_conns, &ck, &n, BPF_NOEXIST);
			tcp_set_role(&r, gen, TCP_ROLE_CLIENT);
			return;
		}
		if (__sync_fetch_and_or(&c->state, TCP_C_OPEN) & TCP_C_OPEN) {
			tcp_add(&e->tcp_syn_retrans, 1);
			return;
		}
		__u64 lat = now - c->syn_ns;
		struct enrich_value *ce = tcp_entry(&r, gen);
		if (!ce)
			return;
		ce->tcp_handshake_ns = lat;
		if (lat > ce->tcp_handshake_max_ns)
			ce->tcp_handshake_max_ns = lat;
		return;
	}
	/* A FIN ends the tuple's connection: a later SYN on it is a new one. */
	if ((seg & TH_FIN) && c && !(c->state & TCP_C_FIN))
		__sync_fetch_and_or(&c->state, TCP_C_FIN);
}

/*
 * A client that gave up: its socket leaves SYN_SENT for CLOSE while its
 * connect is still pending in tcp_conns (an answer, SYN-ACK or RST, is
 * seen by the TC programs before the socket gets it). The delete is the
 * claim: a RST racing it counts a refusal, not both.
 */
SEC("tp_btf/inet_sock_set_state")
int tcp_state(unsigned long long *ctx)
{
	const struct sock *sk = (const struct sock *)ctx[0];
	int oldstate = (int)ctx[1], newstate = (int)ctx[2];
	if (oldstate != TCP_SYN_SENT_ || newstate != TCP_CLOSE_ || sk->sk_protocol != IPPROTO_TCP)
		return 0;
	TCP_KEY key = {};
	if (sock_key(sk, &key, 0))
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return 0;
	key.src_port = bpf_ntohs(((struct inet_sock___tcp *)tp)->inet_sport);
	TCP_KEY ck;
	int fwd = tcp_canon(&ck, &key);
	struct tcp_conn *c = bpf_map_lookup_elem(&tcp_conns, &ck);
	if (!c || (c->state & TCP_C_OPEN) || !tcp_client_side(c, fwd))
		return 0;
	struct tcp_conn kept = *c;
	if (bpf_map_delete_elem(&tcp_conns, &ck))
		return 0;
	__u32 gen = generation();
	struct enrich_value *e = enrich_entry(&key, gen);
	if (!e)
		return 0;
	__sync_fetch_and_add(&e->tcp_timeouts, 1);
	/* "Timed out, its SYNs dropped by ...": one record. A drop of this
	 * period is there already; else the one its connection kept. */
	if (!e->drop_cause && !e->drop_packets) {
		e->drop_cause = kept.drop_cause;
		e->drop_tcp_flags = kept.drop_tcp_flags;
		e->drop_tcp_state = kept.drop_tcp_state;
	}
	return 0;
}

#endif
