// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * flowlens enrichment hooks: packet drops (kfree_skb with its reason), TCP
 * smoothed RTT and TCP retransmits. They never write the flow maps: they
 * write the enrichment maps, keyed by the same 7-tuple, which the agent
 * evicts in the same cycle as the flows and merges by key.
 *
 * Like the flow maps, the enrichment maps are a double buffer switched by
 * the shared "control" map, so an eviction reads a map no program writes.
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

const struct enrich_value *unused_enrich_value __attribute__((unused));

static __always_inline struct enrich_value *enrich_entry(const struct flow_key *key)
{
	__u32 zero = 0;
	__u32 *active = bpf_map_lookup_elem(&control, &zero);
	void *m = (active && *active) ? (void *)&enrich_b : (void *)&enrich_a;
	struct enrich_value *v = bpf_map_lookup_elem(m, key);
	if (v)
		return v;
	struct enrich_value zv = {};
	bpf_map_update_elem(m, key, &zv, BPF_NOEXIST); /* -EEXIST: another CPU won; fine */
	return bpf_map_lookup_elem(m, key);
}

static __always_inline void v4mapped(__u8 *dst, __u32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &addr, 4);
}

/*
 * sock_key builds the key of a TCP socket's flow. inbound: the flow of the
 * packets the socket receives (remote -> local); otherwise the flow of the
 * packets it sends (local -> remote). IPv4-mapped IPv6 sockets already store
 * addresses in the key's format.
 */
static __always_inline int sock_key(const struct sock *sk, struct flow_key *k, int inbound)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	__u8 local[16], remote[16];
	if (family == AF_INET) {
		v4mapped(local, BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr));
		v4mapped(remote, BPF_CORE_READ(sk, __sk_common.skc_daddr));
	} else if (family == AF_INET6) {
		BPF_CORE_READ_INTO(&local, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&remote, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		return -1;
	}
	__u16 lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u16 rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
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

static __always_inline int record_rtt(struct sock *sk)
{
	struct flow_key key = {};
	if (sock_key(sk, &key, 1))
		return 0;
	__u32 srtt_us = BPF_CORE_READ((struct tcp_sock *)sk, srtt_us) >> 3;
	if (srtt_us == 0)
		return 0;
	struct enrich_value *v = enrich_entry(&key);
	if (!v)
		return 0;
	__u64 rtt = (__u64)srtt_us * 1000;
	v->rtt_ns = rtt;
	if (rtt > v->rtt_max_ns)
		v->rtt_max_ns = rtt;
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
	struct enrich_value *v = enrich_entry(&key);
	if (v)
		v->retransmits += 1; /* under the socket lock */
	return 0;
}

/* ---- drops ---- */

/*
 * skb_key builds the key from the dropped packet's own headers, so it is the
 * key the TC program gave the same packet. Returns the L4 header's first
 * bytes through tcp_flags for TCP.
 */
static __always_inline int skb_key(struct sk_buff *skb, struct flow_key *k, __u16 *tcp_flags)
{
	__u16 nh = BPF_CORE_READ(skb, network_header);
	if (nh == (__u16)~0U)
		return -1;
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 proto = bpf_ntohs(BPF_CORE_READ(skb, protocol));
	unsigned char *l3 = head + nh;
	unsigned char *l4;
	__u8 l4proto;
	if (proto == ETH_P_IP) {
		__u8 vihl;
		__u16 frag;
		__u32 saddr, daddr;
		bpf_probe_read_kernel(&vihl, 1, l3);
		if ((vihl >> 4) != 4 || (vihl & 0xf) < 5)
			return -1;
		bpf_probe_read_kernel(&frag, 2, l3 + 6);
		bpf_probe_read_kernel(&l4proto, 1, l3 + 9);
		bpf_probe_read_kernel(&saddr, 4, l3 + 12);
		bpf_probe_read_kernel(&daddr, 4, l3 + 16);
		v4mapped(k->src_ip, saddr);
		v4mapped(k->dst_ip, daddr);
		k->proto = l4proto;
		if (bpf_ntohs(frag) & 0x1fff)
			return 0;
		l4 = l3 + (vihl & 0xf) * 4;
	} else if (proto == ETH_P_IPV6) {
		bpf_probe_read_kernel(&l4proto, 1, l3 + 6);
		bpf_probe_read_kernel(k->src_ip, 16, l3 + 8);
		bpf_probe_read_kernel(k->dst_ip, 16, l3 + 24);
		k->proto = l4proto;
		/* Extension headers: trust the stack's transport header when set. */
		__u16 th = BPF_CORE_READ(skb, transport_header);
		l4 = (th != (__u16)~0U && th > nh) ? head + th : l3 + 40;
	} else {
		return -1;
	}
	switch (k->proto) {
	case IPPROTO_TCP: {
		__u8 fl;
		__u16 ports[2];
		bpf_probe_read_kernel(ports, 4, l4);
		bpf_probe_read_kernel(&fl, 1, l4 + 13);
		k->src_port = bpf_ntohs(ports[0]);
		k->dst_port = bpf_ntohs(ports[1]);
		*tcp_flags = fl;
		break;
	}
	case IPPROTO_UDP:
	case 132: { /* SCTP */
		__u16 ports[2];
		bpf_probe_read_kernel(ports, 4, l4);
		k->src_port = bpf_ntohs(ports[0]);
		k->dst_port = bpf_ntohs(ports[1]);
		break;
	}
	case IPPROTO_ICMP:
	case 58: /* ICMPv6 */
		bpf_probe_read_kernel(&k->icmp_type, 1, l4);
		bpf_probe_read_kernel(&k->icmp_code, 1, l4 + 1);
		break;
	}
	return 0;
}

static __always_inline int record_drop(struct sk_buff *skb, __u32 reason)
{
	if (reason == reason_consumed || reason == reason_not_specified || reason == 0)
		return 0;
	struct flow_key key = {};
	__u16 flags = 0;
	if (skb_key(skb, &key, &flags))
		return 0;
	/* Frame bytes from the MAC header when the packet has one (received
	 * packets), as the TC programs count them; else from the network header. */
	__u32 len = BPF_CORE_READ(skb, len);
	__u16 mh = BPF_CORE_READ(skb, mac_header);
	if (mh != (__u16)~0U) {
		unsigned char *head = BPF_CORE_READ(skb, head);
		unsigned char *data = BPF_CORE_READ(skb, data);
		long l2 = data - (head + mh);
		if (l2 > 0 && l2 < 256)
			len += l2;
	}
	struct enrich_value *v = enrich_entry(&key);
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->drop_packets, 1);
	__sync_fetch_and_add(&v->drop_bytes, len);
	v->drop_cause = reason;
	if (key.proto == IPPROTO_TCP) {
		struct sock *sk = BPF_CORE_READ(skb, sk);
		v->drop_tcp_flags = flags;
		v->drop_tcp_state = sk ? BPF_CORE_READ(sk, __sk_common.skc_state) : 0;
	}
	return 0;
}

SEC("tp_btf/kfree_skb")
int drop_kfree_skb(unsigned long long *ctx)
{
	return record_drop((struct sk_buff *)ctx[0], (__u32)ctx[2]);
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
	return record_drop((struct sk_buff *)BPF_CORE_READ(args, skbaddr), BPF_CORE_READ(args, reason));
}
