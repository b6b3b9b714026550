// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * On-demand packet capture (issue #32, internal/agent/capture). A separate
 * object from bpf/datapath.c: it is loaded only while a capture runs and
 * attached beside the flow programs (after them on each hook), so with no
 * capture the flow programs' per-packet cost is unchanged. It never
 * changes a packet's fate: it always returns TC_ACT_UNSPEC (TCX_NEXT).
 *
 * Each capture loads one instance per (namespace, direction, link type);
 * the filter, the snaplen, the namespace (an index) and the direction are
 * load-time constants (rodata), so the checks a capture does not ask for
 * are removed by the verifier and cost nothing.
 *
 * The ring is one BPF ring buffer (BPF_MAP_TYPE_RINGBUF) for all CPUs: its
 * pages are charged to the agent's memory cgroup like every map (a perf
 * event array's are not, and count against RLIMIT_MEMLOCK and
 * perf_event_mlock_kb instead), and one ring keeps the packets of all CPUs
 * in the order they were written. A record is the metadata then the first
 * cap_len bytes of the packet, written to the CPU's scratch value
 * (cap_scratch, sizeof(cap_meta) + the snaplen, sized by the agent at load)
 * with bpf_skb_load_bytes (linear or not) and copied to the ring with
 * bpf_ringbuf_output at its exact length: a bpf_ringbuf_reserve would need
 * a constant size, meta + snaplen, for every packet, and a 64-byte packet
 * under a 65000-byte snaplen would take 65 KB of the ring. A record the
 * ring cannot take (full) is counted in cap_counts, per CPU.
 *
 * The reader is woken only when the ring's unread bytes cross cap_wake (an
 * eighth of the ring, a load-time constant); the records below it are read
 * at the reader's poll timeout. A wake-up per record cost a match
 * microseconds (docs/benchmarks.md §23).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "capture.h"

char __license[] SEC("license") = "Dual BSD/GPL";

const volatile struct cap_filter cap_conf = {};
const volatile __u64 cap_ns = 0;
const volatile __u32 cap_dir = 0;
const volatile __u32 cap_snaplen = 128;
const volatile __u32 cap_l2_len = ETH_HLEN; /* 0 on devices without an Ethernet header */
const volatile __u64 cap_wake = 4096;         /* unread bytes that wake the reader */

/* The ring; its size (max_entries, a power-of-two number of pages) is set
 * by the agent at load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} cap_ring SEC(".maps");

/* Where a record is put together before it is copied to the ring, one
 * value per CPU (an array indexed by the CPU: a per-CPU array's values are
 * at most 32 KiB, and the snaplen may be 65000); its value size
 * (sizeof(struct cap_meta) + the snaplen) and entries (the possible CPUs)
 * are set by the agent at load, so it has no BTF value type. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct cap_meta) + 128);
} cap_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CAP_COUNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} cap_counts SEC(".maps");

/* Make bpf2go emit the shared types (-type in internal/agent/capture/gen.go). */
const struct cap_meta *unused_cap_meta __attribute__((unused));
const enum cap_count *unused_cap_count __attribute__((unused));

static __always_inline void count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&cap_counts, &slot);
	if (v)
		*v += 1;
}

static __always_inline int prefix_in(const volatile struct cap_prefix *p, __u32 n, const __u32 *a)
{
	for (__u32 i = 0; i < CAP_MAX_CIDRS; i++) {
		if (i >= n)
			break;
		if ((a[0] & p[i].mask[0]) == p[i].addr[0] && (a[1] & p[i].mask[1]) == p[i].addr[1] &&
		    (a[2] & p[i].mask[2]) == p[i].addr[2] && (a[3] & p[i].mask[3]) == p[i].addr[3])
			return 1;
	}
	return 0;
}

static __always_inline int port_in(const volatile __u16 *ps, __u32 n, __u16 port)
{
	for (__u32 i = 0; i < CAP_MAX_PORTS; i++) {
		if (i >= n)
			break;
		if (ps[i] == port)
			return 1;
	}
	return 0;
}

/* load copies len bytes at off: straight from the linear data when they
 * are there (the common case: headers), else with bpf_skb_load_bytes,
 * which reads non-linear data too. len is a constant; off is bounded. */
static __always_inline int load(struct __sk_buff *skb, __u32 off, void *to, const __u32 len)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (off <= 0x1ff) {
		__u32 o = off & 0x1ff; /* the bound, for the verifier */
		if (data + o + len <= end) {
			__builtin_memcpy(to, data + o, len);
			return 0;
		}
	}
	return bpf_skb_load_bytes(skb, off, to, len);
}

/* match parses what the filter needs (nothing when it needs nothing). */
static __always_inline int match(struct __sk_buff *skb)
{
	const volatile struct cap_filter *f = &cap_conf;
	if (!f->needs_ip)
		return 1;

	__u32 src[4] = {}, dst[4] = {};
	__u8 proto;
	__u32 off = cap_l2_len;
	int l4 = 1; /* the L4 header follows (not a later fragment) */

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 ip[20];
		if (load(skb, off, ip, sizeof(ip)))
			return 0;
		if ((ip[0] >> 4) != 4)
			return 0;
		proto = ip[9];
		src[2] = dst[2] = bpf_htonl(0xffff);
		__builtin_memcpy(&src[3], &ip[12], 4);
		__builtin_memcpy(&dst[3], &ip[16], 4);
		if (((ip[6] & 0x1f) | ip[7]) != 0) /* fragment offset > 0 */
			l4 = 0;
		off += (ip[0] & 0xf) * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 ip6[40];
		if (load(skb, off, ip6, sizeof(ip6)))
			return 0;
		proto = ip6[6];
		__builtin_memcpy(src, &ip6[8], 16);
		__builtin_memcpy(dst, &ip6[24], 16);
		off += 40;
		/* A few extension headers: hop-by-hop, routing, destination
		 * options, fragment. */
		for (int i = 0; i < 4; i++) {
			__u8 ext[8];
			if (proto != 0 && proto != 43 && proto != 60 && proto != 44)
				break;
			if (load(skb, off, ext, sizeof(ext)))
				return 0;
			if (proto == 44) {
				if (((ext[2] << 8 | ext[3]) & 0xfff8) != 0)
					l4 = 0;
				off += 8;
			} else {
				off += (ext[1] + 1) * 8;
			}
			proto = ext[0];
		}
	} else {
		return 0;
	}

	if (f->n_peer) {
		/* A pair (peer_cidr of the flow filter rules): (src in cidrs
		 * and dst in peer) or (dst in cidrs and src in peer). A packet
		 * with neither end in cidrs costs what it costs without peer:
		 * two passes over cidrs. n_peer is a load-time constant: with
		 * none, the verifier removes this branch. */
		if (!(prefix_in(f->cidrs, f->n_cidrs, src) && prefix_in(f->peer, f->n_peer, dst)) &&
		    !(prefix_in(f->cidrs, f->n_cidrs, dst) && prefix_in(f->peer, f->n_peer, src)))
			return 0;
	} else if (f->n_cidrs && !prefix_in(f->cidrs, f->n_cidrs, src) && !prefix_in(f->cidrs, f->n_cidrs, dst)) {
		return 0;
	}
	if (f->n_src && !prefix_in(f->src, f->n_src, src))
		return 0;
	if (f->n_dst && !prefix_in(f->dst, f->n_dst, dst))
		return 0;
	if (f->n_protos) {
		int ok = 0;
		for (__u32 i = 0; i < CAP_MAX_PROTOS; i++) {
			if (i >= f->n_protos)
				break;
			if (f->protos[i] == proto)
				ok = 1;
		}
		if (!ok)
			return 0;
	}
	if (f->n_ports || f->n_sports || f->n_dports) {
		__u16 p[2];
		if (!l4 || (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP &&
			    proto != IPPROTO_UDPLITE))
			return 0;
		if (load(skb, off, p, sizeof(p)))
			return 0;
		__u16 sp = bpf_ntohs(p[0]), dp = bpf_ntohs(p[1]);
		if (f->n_ports && !port_in(f->ports, f->n_ports, sp) && !port_in(f->ports, f->n_ports, dp))
			return 0;
		if (f->n_sports && !port_in(f->sports, f->n_sports, sp))
			return 0;
		if (f->n_dports && !port_in(f->dports, f->n_dports, dp))
			return 0;
	}
	if (f->n_flags) {
		__u8 b[2];
		if (!l4 || proto != IPPROTO_TCP)
			return 0;
		if (load(skb, off + 12, b, sizeof(b)))
			return 0;
		__u16 flags = (__u16)(b[0] & 1) << 8 | b[1]; /* NS, then CWR..FIN */
		int ok = 0;
		for (__u32 i = 0; i < CAP_MAX_FLAGS; i++) {
			if (i >= f->n_flags)
				break;
			if ((flags & f->flags[i]) == f->flags[i])
				ok = 1;
		}
		if (!ok)
			return 0;
	}
	return 1;
}

SEC("tc")
int flowlens_capture(struct __sk_buff *skb)
{
	if (!match(skb))
		return TC_ACT_UNSPEC;
	count(CAP_COUNT_MATCHED);
	__u32 cpu = bpf_get_smp_processor_id();
	struct cap_meta *m = bpf_map_lookup_elem(&cap_scratch, &cpu);
	if (!m)
		return TC_ACT_UNSPEC;
	__u32 cap = skb->len;
	if (cap > cap_snaplen)
		cap = cap_snaplen; /* a constant: the verifier bounds the copy by it */
	m->ts = bpf_ktime_get_ns();
	m->ns = cap_ns;
	m->ifindex = skb->ifindex;
	m->wire_len = skb->len;
	m->cap_len = cap;
	m->dir = cap_dir;
	if (cap > 0 && bpf_skb_load_bytes(skb, 0, (void *)(m + 1), cap))
		return TC_ACT_UNSPEC; /* cannot happen: cap <= skb->len */
	__u64 size = sizeof(*m) + cap;
	__u64 unread = bpf_ringbuf_query(&cap_ring, BPF_RB_AVAIL_DATA);
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (unread < cap_wake && unread + size >= cap_wake)
		flags = BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_output(&cap_ring, m, size, flags))
		count(CAP_COUNT_RING_FULL); /* the ring is full */
	return TC_ACT_UNSPEC;
}
