// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * flowlens enrichment hooks: packet drops (kfree_skb with its reason), TCP
 * smoothed RTT and TCP retransmits. They never write the flow maps: they
 * write the enrichment maps, keyed by the same 7-tuple, which the agent
 * evicts in the same cycle as the flows and merges by key.
 *
 * Like the flow maps, the enrichment maps are a double buffer switched by
 * the shared "control" map, so an eviction reads a map no program writes.
 * control[0] is a generation counter the agent increments at each eviction;
 * its parity picks the active map.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "types.h"
#include "core.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10

/* Values of enum skb_drop_reason that are not drops; the agent reads them
 * from the running kernel's BTF (they differ between versions). */
volatile const __u32 reason_consumed = 1;
volatile const __u32 reason_not_specified = 2;

/*
 * One shared hash (not per-CPU), no preallocation: enrichment entries are
 * few next to flows, and a per-CPU value would multiply their memory by the
 * CPU count and make the agent fold them. Concurrency: RTT and retransmit
 * updates of one flow run under its TCP socket's lock, so plain stores are
 * race-free; drops of one flow can hit several CPUs at once, so their
 * counters use atomic adds (the "latest" cause/state/flags are plain stores:
 * last writer wins).
 */
struct enrich_value {
	__u64 drop_packets;
	__u64 drop_bytes;
	__u64 rtt_ns;     /* latest smoothed RTT */
	__u64 rtt_max_ns;
	__u64 retransmits;
	__u32 drop_cause; /* enum skb_drop_reason */
	__u16 drop_tcp_flags;
	__u8 drop_tcp_state;
	__u8 _pad;
};

#define DEFINE_ENRICH_MAP(name)                          \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_HASH);         \
		__type(key, struct flow_key);            \
		__type(value, struct enrich_value);      \
		__uint(max_entries, 1);                  \
		__uint(map_flags, BPF_F_NO_PREALLOC);    \
	} name SEC(".maps")

DEFINE_ENRICH_MAP(enrich_a);
DEFINE_ENRICH_MAP(enrich_b);

/* Shared with flows.c (the agent passes the same map to both objects). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} control SEC(".maps");

/* Per-CPU counters of the enrichment hooks (the datapath's "counters" map
 * belongs to flows.c). Index 0: events lost because their entry could not
 * be inserted (map full, or the no-prealloc allocator failed). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} enrich_counters SEC(".maps");

const struct enrich_value *unused_enrich_value __attribute__((unused));

static __always_inline __u32 generation(void)
{
	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&control, &zero);
	return gen ? *gen : 0;
}

/* The entry of key in the enrichment map of generation gen (inserted when
 * missing); NULL if it cannot be inserted. */
static __always_inline struct enrich_value *enrich_entry(const struct flow_key *key, __u32 gen)
{
	__u32 zero = 0;
	void *m = (gen & 1) ? (void *)&enrich_b : (void *)&enrich_a;
	struct enrich_value *v = bpf_map_lookup_elem(m, key);
	if (v)
		return v;
	struct enrich_value zv = {};
	bpf_map_update_elem(m, key, &zv, BPF_NOEXIST); /* -EEXIST: another CPU won; fine */
	v = bpf_map_lookup_elem(m, key);
	if (!v) {
		__u64 *lost = bpf_map_lookup_elem(&enrich_counters, &zero);
		if (lost)
			*lost += 1; /* per-CPU: no other writer */
	}
	return v;
}

/*
 * Reading kernel structs. tp_btf and fentry programs get BTF-typed pointers
 * and dereference them directly: a load whose offset CO-RE relocates and the
 * verifier makes fault-safe (PROBE_MEM), no helper call. The classic
 * tracepoint gets the skb as a plain number, so it must go through
 * bpf_probe_read_kernel (BPF_CORE_READ). Code shared by both takes the mode
 * as a constant argument; __always_inline leaves one branch per program.
 */
#define BTF_PTR 1
#define RAW_PTR 0
#define RD(mode, p, field) ((mode) == BTF_PTR ? (p)->field : BPF_CORE_READ(p, field))

static __always_inline void v4mapped(__u8 *dst, __u32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &addr, 4);
}

/* Word loads: a memcpy from the byte array would be 16 one-byte loads (the
 * array's alignment is 1). */
static __always_inline void copy6(__u8 *dst, const struct in6_addr___fl *a)
{
	__u32 w[4] = {a->in6_u.u6_addr32[0], a->in6_u.u6_addr32[1],
		      a->in6_u.u6_addr32[2], a->in6_u.u6_addr32[3]};
	__builtin_memcpy(dst, w, 16);
}

/*
 * sock_key builds the key of a TCP socket's flow. inbound: the flow of the
 * packets the socket receives (remote -> local); otherwise the flow of the
 * packets it sends (local -> remote). IPv4-mapped IPv6 sockets already store
 * addresses in the key's format. sk must be a BTF pointer (tp_btf, fentry).
 */
static __always_inline int sock_key(const struct sock *sk, struct flow_key *k, int inbound)
{
	const struct sock_common *c = &sk->__sk_common;
	__u16 family = c->skc_family;
	__u8 local[16], remote[16];
	if (family == AF_INET) {
		v4mapped(local, c->skc_rcv_saddr);
		v4mapped(remote, c->skc_daddr);
	} else if (family == AF_INET6) {
		copy6(local, &c->skc_v6_rcv_saddr);
		copy6(remote, &c->skc_v6_daddr);
	} else {
		return -1;
	}
	__u16 lport = c->skc_num;
	__u16 rport = bpf_ntohs(c->skc_dport);
	if (inbound) {
		__builtin_memcpy(k->src_ip, remote, 16);
		__builtin_memcpy(k->dst_ip, local, 16);
		k->src_port = rport;
		k->dst_port = lport;
	} else {
		__builtin_memcpy(k->src_ip, local, 16);
		__builtin_memcpy(k->dst_ip, remote, 16);
		k->src_port = lport;
		k->dst_port = rport;
	}
	k->proto = IPPROTO_TCP;
	return 0;
}

/* ---- RTT ---- */

/*
 * Per-socket memory of the RTT hook: the srtt it last stored in an
 * enrichment entry and the generation of that entry's map. The hook runs on
 * every received segment but srtt changes far less often, so a sample equal
 * to what this generation's entry already holds (rtt_ns = srtt, rtt_max_ns
 * >= srtt) is skipped without touching the enrichment map. A new generation
 * always writes: its map was emptied by the agent before it became active.
 * The full counter is compared, not its parity: two generations apart the
 * same map is active again, but empty. (The counter is a __u32: a false skip
 * would need a socket idle across exactly 2^32 evictions.)
 */
struct rtt_seen {
	__u32 srtt_us;
	__u32 gen;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct rtt_seen);
} rtt_seen SEC(".maps");

static __always_inline int record_rtt(struct sock *sk)
{
	/* srtt_us lies beyond struct sock: the verifier wants a tcp_sock pointer. */
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	__u32 srtt_us = tp->srtt_us >> 3;
	if (srtt_us == 0) /* no RTT sample yet */
		return 0;
	__u32 gen = generation();
	/* A new storage is zeroed: srtt_us 0 never matches a sample. Updates
	 * run under the socket lock, like the entry's. */
	struct rtt_seen *seen = bpf_sk_storage_get(&rtt_seen, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (seen && seen->srtt_us == srtt_us && seen->gen == gen)
		return 0;
	struct flow_key key = {};
	if (sock_key(sk, &key, 1))
		return 0;
	struct enrich_value *v = enrich_entry(&key, gen);
	if (!v)
		return 0; /* not recorded in seen: the next sample retries */
	__u64 rtt = (__u64)srtt_us * 1000;
	v->rtt_ns = rtt;
	if (rtt > v->rtt_max_ns)
		v->rtt_max_ns = rtt;
	if (seen) {
		seen->srtt_us = srtt_us;
		seen->gen = gen;
	}
	return 0;
}

/* Preferred: fentry costs less than a tracepoint; refused on some kernels. */
SEC("fentry/tcp_rcv_established")
int rtt_fentry(unsigned long long *ctx)
{
	return record_rtt((struct sock *)ctx[0]);
}

/* Fallback: the tcp_probe tracepoint fires in the same place. */
SEC("tp_btf/tcp_probe")
int rtt_tcp_probe(unsigned long long *ctx)
{
	return record_rtt((struct sock *)ctx[0]);
}

/* ---- retransmits ---- */

SEC("tp_btf/tcp_retransmit_skb")
int retransmit(unsigned long long *ctx)
{
	struct flow_key key = {};
	if (sock_key((struct sock *)ctx[0], &key, 0))
		return 0;
	struct enrich_value *v = enrich_entry(&key, generation());
	if (v)
		v->retransmits += 1; /* under the socket lock */
	return 0;
}

/* ---- drops ---- */

/*
 * skb_key builds the key from the dropped packet's own headers, so it is the
 * key the TC program gave the same packet. Returns the L4 header's first
 * bytes through tcp_flags for TCP. The packet bytes are no BTF-typed memory:
 * they are copied with bpf_probe_read_kernel, one call per header (the skb's
 * head buffer ends with skb_shared_info, so reading a whole header's worth
 * past a valid offset stays in the allocation).
 */
static __always_inline int skb_key(struct sk_buff *skb, int mode, struct flow_key *k, __u16 *tcp_flags)
{
	__u16 nh = RD(mode, skb, network_header);
	if (nh == (__u16)~0U)
		return -1;
	unsigned char *head = RD(mode, skb, head);
	__u16 proto = bpf_ntohs(RD(mode, skb, protocol));
	unsigned char *l3 = head + nh;
	unsigned char *l4;
	__u8 h[40];
	if (proto == ETH_P_IP) {
		bpf_probe_read_kernel(h, 20, l3);
		if ((h[0] >> 4) != 4 || (h[0] & 0xf) < 5)
			return -1;
		v4mapped(k->src_ip, *(__u32 *)&h[12]);
		v4mapped(k->dst_ip, *(__u32 *)&h[16]);
		k->proto = h[9];
		if (bpf_ntohs(*(__u16 *)&h[6]) & 0x1fff) /* not the first fragment: no L4 header */
			return 0;
		l4 = l3 + (h[0] & 0xf) * 4;
	} else if (proto == ETH_P_IPV6) {
		bpf_probe_read_kernel(h, 40, l3);
		k->proto = h[6];
		__builtin_memcpy(k->src_ip, &h[8], 16);
		__builtin_memcpy(k->dst_ip, &h[24], 16);
		/* Extension headers: trust the stack's transport header when set. */
		__u16 th = RD(mode, skb, transport_header);
		l4 = (th != (__u16)~0U && th > nh) ? head + th : l3 + 40;
	} else {
		return -1;
	}
	switch (k->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case 132: /* SCTP */
		bpf_probe_read_kernel(h, 14, l4); /* ports; TCP flags at 13 */
		k->src_port = bpf_ntohs(*(__u16 *)&h[0]);
		k->dst_port = bpf_ntohs(*(__u16 *)&h[2]);
		if (k->proto == IPPROTO_TCP)
			*tcp_flags = h[13];
		break;
	case IPPROTO_ICMP:
	case 58: /* ICMPv6 */
		bpf_probe_read_kernel(h, 2, l4);
		k->icmp_type = h[0];
		k->icmp_code = h[1];
		break;
	}
	return 0;
}

static __always_inline int record_drop(struct sk_buff *skb, int mode, __u32 reason)
{
	if (reason == reason_consumed || reason == reason_not_specified || reason == 0)
		return 0;
	struct flow_key key = {};
	__u16 flags = 0;
	if (skb_key(skb, mode, &key, &flags))
		return 0;
	/* Frame bytes from the MAC header when the packet has one (received
	 * packets), as the TC programs count them; else from the network header. */
	__u32 len = RD(mode, skb, len);
	__u16 mh = RD(mode, skb, mac_header);
	if (mh != (__u16)~0U) {
		unsigned char *head = RD(mode, skb, head);
		unsigned char *data = RD(mode, skb, data);
		long l2 = data - (head + mh);
		if (l2 > 0 && l2 < 256)
			len += l2;
	}
	struct enrich_value *v = enrich_entry(&key, generation());
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->drop_packets, 1);
	__sync_fetch_and_add(&v->drop_bytes, len);
	v->drop_cause = reason;
	if (key.proto == IPPROTO_TCP) {
		struct sock *sk = RD(mode, skb, sk);
		v->drop_tcp_flags = flags;
		v->drop_tcp_state = sk ? RD(mode, sk, __sk_common.skc_state) : 0;
	}
	return 0;
}

SEC("tp_btf/kfree_skb")
int drop_kfree_skb(unsigned long long *ctx)
{
	return record_drop((struct sk_buff *)ctx[0], BTF_PTR, (__u32)ctx[2]);
}

/*
 * Fallback where tp_btf is missing: the classic tracepoint (needs tracefs
 * mounted). Its record layout changed between kernels (rx_sk was added
 * before protocol), so fields are read with CO-RE by name.
 */
enum skb_drop_reason___fl { SKB_DROP_REASON___FL_UNUSED }; /* CO-RE matches the kernel's enum by name */

struct trace_event_raw_kfree_skb {
	void *skbaddr;
	enum skb_drop_reason___fl reason;
} __attribute__((preserve_access_index));

SEC("tracepoint/skb/kfree_skb")
int drop_tracepoint(struct trace_event_raw_kfree_skb *args)
{
	return record_drop((struct sk_buff *)BPF_CORE_READ(args, skbaddr), RAW_PTR, BPF_CORE_READ(args, reason));
}
