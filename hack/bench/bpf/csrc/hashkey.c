// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * What a 16-byte IPv4 flow key would buy (issue #33, item 2; hack/bench/bpf,
 * hashkey.go, not part of the agent). Hash maps shaped like the flow map
 * (bpf/maps.h: preallocated, a spin lock in the value, the same
 * max_entries, set at load) keyed by today's 40-byte struct flow_key or by
 * a 16-byte IPv4 key, and the three operations the TC programs do on them:
 *
 *   hit    a lookup that finds its entry (and reads one value byte)
 *   new    a lookup that misses, then an insert (BPF_NOEXIST): a new flow
 *   exist  a lookup, then the counting path of bpf/flows.h (fast: compare
 *          ifaces[0] and first_dir; add: two atomic adds, last_seen, the
 *          TCP flags test)
 *   lock   a lookup, then the counters under the value's spin lock
 *
 * The maps (the element is the kernel's 48-byte htab_elem header, the key
 * rounded up to 8 bytes and the value):
 *
 *   k40   struct flow_key, struct flow_value (168 bytes): today's 256-byte
 *         element; fast reads value bytes 0-39 (element line 1, with the
 *         key's tail) and ifaces[0] (line 2)
 *   k16   struct key16, struct flow_value: the same value, a 232-byte
 *         element (not line-aligned)
 *   k16a  struct key16, the value padded to 192 bytes: a 256-byte element
 *         again; header and key fill line 0, so the value's first 64
 *         bytes (ifaces[0] included) are line 1
 *   k40h  struct flow_key, struct hot40 (168 bytes): the 40-byte key with
 *         the counting path's fields packed into value bytes 0-39 (a
 *         32-bit last_seen, the lock moved out), so fast and add touch
 *         line 1 only: what a one-line value costs without the new key
 *
 * Keys are derived from a cursor (a stride through [first, first+n), as the
 * driver does), so BPF_PROG_TEST_RUN walks n entries in scattered order;
 * key_only, the key construction alone, is the floor.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "types.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* The IPv4 key: the fields of struct flow_key, with 4-byte addresses. */
struct key16 {
	__u32 src_ip;
	__u32 dst_ip;
	__u16 src_port;
	__u16 dst_port;
	__u8 proto;
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 zone;
};

struct value192 {
	struct flow_value v;
	__u8 _pad[24];
};

/* Today's value, its counting path packed into bytes 0-39. */
struct hot40 {
	__u16 tcp_flags; /* the atomic OR's 8-byte word: first_dir... share it */
	__u8 first_dir;
	__u8 listed_only;
	__u8 n_ifaces;
	__u8 flags;
	__u16 eth_type;
	__u64 bytes;
	__u64 packets;
	__u32 last_seen; /* jiffies, low 32 bits */
	__u32 ifindex0;  /* ifaces[0], split: its ifindex and netns */
	__u64 netns0;    /* ends at byte 40 */
	struct bpf_spin_lock lock;
	__u32 dir0;
	__u8 rest[120];
};

_Static_assert(sizeof(struct key16) == 16, "key16");
_Static_assert(sizeof(struct value192) == 192, "value192");
_Static_assert(sizeof(struct hot40) == sizeof(struct flow_value), "hot40");

#define MAP(name, K, V)                          \
	struct {                                 \
		__uint(type, BPF_MAP_TYPE_HASH); \
		__type(key, K);                  \
		__type(value, V);                \
		__uint(max_entries, 1);          \
	} name SEC(".maps")

MAP(k40, struct flow_key, struct flow_value);
MAP(k16, struct key16, struct flow_value);
MAP(k16a, struct key16, struct value192);
MAP(k40h, struct flow_key, struct hot40);

/* The cursor: one entry, written by user space before each measurement. */
struct cursor {
	__u32 i;
	__u32 first;
	__u32 n;
	__u32 stride;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct cursor);
	__uint(max_entries, 1);
} cursor SEC(".maps");

/* Operations that did not do what they should (a miss on hit, a failed
 * insert): user space requires 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} failed SEC(".maps");

static __always_inline void fail(void)
{
	__u32 zero = 0;
	__u64 *f = bpf_map_lookup_elem(&failed, &zero);
	if (f)
		*f += 1;
}

static __always_inline int next(__u32 *idx)
{
	__u32 zero = 0;
	struct cursor *c = bpf_map_lookup_elem(&cursor, &zero);
	if (!c)
		return -1;
	__u32 i = c->i + c->stride;
	if (i >= c->n)
		i -= c->n;
	c->i = i;
	*idx = 0x0a000000 + c->first + i; /* 10.0.0.0 + index, as the driver */
	return 0;
}

static __always_inline int key40(struct flow_key *k)
{
	__u32 idx;
	if (next(&idx))
		return -1;
	__builtin_memset(k, 0, sizeof(*k));
	k->src_ip[10] = 0xff;
	k->src_ip[11] = 0xff;
	__u32 a = bpf_htonl(idx);
	__builtin_memcpy(&k->src_ip[12], &a, 4);
	k->dst_ip[10] = 0xff;
	k->dst_ip[11] = 0xff;
	k->dst_ip[12] = 10;
	k->dst_ip[13] = 100;
	k->dst_ip[15] = 1;
	k->src_port = bpf_htons(40000);
	k->dst_port = bpf_htons(80);
	k->proto = 17;
	k->zone = 1;
	return 0;
}

static __always_inline int key16(struct key16 *k)
{
	__u32 idx;
	if (next(&idx))
		return -1;
	__builtin_memset(k, 0, sizeof(*k));
	k->src_ip = bpf_htonl(idx);
	k->dst_ip = bpf_htonl(0x0a640001);
	k->src_port = bpf_htons(40000);
	k->dst_port = bpf_htons(80);
	k->proto = 17;
	k->zone = 1;
	return 0;
}

/* The observation the packets come from (one hook), and the packet. */
#define ME_NETNS 4096ULL
#define ME_IFINDEX 7
#define ME_DIR DIR_INGRESS
#define PKT_BYTES 74

static __always_inline void init_flow(struct flow_value *v)
{
	v->ifaces[0].netns = ME_NETNS;
	v->ifaces[0].ifindex = ME_IFINDEX;
	v->ifaces[0].dir = ME_DIR;
	v->first_dir = ME_DIR;
	v->n_ifaces = 1;
	v->bytes = PKT_BYTES;
	v->packets = 1;
	v->first_seen = v->last_seen = bpf_jiffies64();
}

static __always_inline void init_hot(struct hot40 *v)
{
	v->netns0 = ME_NETNS;
	v->ifindex0 = ME_IFINDEX;
	v->dir0 = ME_DIR;
	v->first_dir = ME_DIR;
	v->n_ifaces = 1;
	v->bytes = PKT_BYTES;
	v->packets = 1;
	v->last_seen = bpf_jiffies64();
}

/* bpf/flows.h's fast and add, on struct flow_value. */
static __always_inline void count_flow(struct flow_value *v, struct __sk_buff *skb)
{
	if (!(v->ifaces[0].ifindex == ME_IFINDEX && v->ifaces[0].netns == ME_NETNS && v->first_dir == ME_DIR &&
	      !(v->listed_only & 1))) {
		fail();
		return;
	}
	__sync_fetch_and_add(&v->bytes, skb->len);
	__sync_fetch_and_add(&v->packets, 1);
	__u64 now = bpf_jiffies64();
	if (v->last_seen != now)
		v->last_seen = now;
	if ((v->tcp_flags | 0x10) != v->tcp_flags)
		__sync_fetch_and_or((__u64 *)&v->tcp_flags, 0x10);
}

static __always_inline void count_hot(struct hot40 *v, struct __sk_buff *skb)
{
	if (!(v->ifindex0 == ME_IFINDEX && v->netns0 == ME_NETNS && v->first_dir == ME_DIR && !(v->listed_only & 1))) {
		fail();
		return;
	}
	__sync_fetch_and_add(&v->bytes, skb->len);
	__sync_fetch_and_add(&v->packets, 1);
	__u32 now = bpf_jiffies64();
	if (v->last_seen != now)
		v->last_seen = now;
	if ((v->tcp_flags | 0x10) != v->tcp_flags)
		__sync_fetch_and_or((__u64 *)&v->tcp_flags, 0x10);
}

static __always_inline void count_locked(struct flow_value *v, struct __sk_buff *skb)
{
	bpf_spin_lock(&v->lock);
	v->bytes += skb->len;
	v->packets += 1;
	bpf_spin_unlock(&v->lock);
}

#define KEY40 struct flow_key
#define KEY16 struct key16
#define MK_k40 key40
#define MK_k16 key16
#define MK_k16a key16
#define MK_k40h key40

/* The programs of one map m (key type K, value type V, its value init I,
 * its counting path C). */
#define PROGS(m, K, V, I, C)                                        \
	SEC("tc") int hit_##m(struct __sk_buff *skb)                \
	{                                                           \
		K k;                                                \
		if (MK_##m(&k))                                     \
			return TC_ACT_SHOT;                         \
		V *v = bpf_map_lookup_elem(&m, &k);                 \
		if (!v)                                             \
			fail();                                     \
		else                                                \
			asm volatile("" : : "r"(((__u8 *)v)[4]));    \
		return TC_ACT_UNSPEC;                               \
	}                                                           \
	SEC("tc") int new_##m(struct __sk_buff *skb)                \
	{                                                           \
		K k;                                                \
		if (MK_##m(&k))                                     \
			return TC_ACT_SHOT;                         \
		V *v = bpf_map_lookup_elem(&m, &k);                 \
		if (v) {                                            \
			fail();                                     \
			return TC_ACT_UNSPEC;                       \
		}                                                   \
		V nv = {};                                          \
		I((void *)&nv);                                     \
		if (bpf_map_update_elem(&m, &k, &nv, BPF_NOEXIST))  \
			fail();                                     \
		return TC_ACT_UNSPEC;                               \
	}                                                           \
	SEC("tc") int exist_##m(struct __sk_buff *skb)              \
	{                                                           \
		K k;                                                \
		if (MK_##m(&k))                                     \
			return TC_ACT_SHOT;                         \
		V *v = bpf_map_lookup_elem(&m, &k);                 \
		if (!v)                                             \
			fail();                                     \
		else                                                \
			C((void *)v, skb);                          \
		return TC_ACT_UNSPEC;                               \
	}                                                           \
	SEC("tc") int del_##m(struct __sk_buff *skb)                \
	{                                                           \
		K k;                                                \
		if (MK_##m(&k))                                     \
			return TC_ACT_SHOT;                         \
		bpf_map_delete_elem(&m, &k); /* a retried run misses */ \
		return TC_ACT_UNSPEC;                               \
	}

#define LOCKPROG(m, K, V)                                   \
	SEC("tc") int lock_##m(struct __sk_buff *skb)       \
	{                                                   \
		K k;                                        \
		if (MK_##m(&k))                             \
			return TC_ACT_SHOT;                 \
		V *v = bpf_map_lookup_elem(&m, &k);         \
		if (!v)                                     \
			fail();                             \
		else                                        \
			count_locked((void *)v, skb);       \
		return TC_ACT_UNSPEC;                       \
	}

PROGS(k40, KEY40, struct flow_value, init_flow, count_flow)
PROGS(k16, KEY16, struct flow_value, init_flow, count_flow)
PROGS(k16a, KEY16, struct value192, init_flow, count_flow)
PROGS(k40h, KEY40, struct hot40, init_hot, count_hot)
LOCKPROG(k40, KEY40, struct flow_value)
LOCKPROG(k16, KEY16, struct flow_value)
LOCKPROG(k16a, KEY16, struct value192)

/* The floors: the key construction alone, for each key size. */
SEC("tc")
int floor40(struct __sk_buff *skb)
{
	struct flow_key k;
	if (key40(&k))
		return TC_ACT_SHOT;
	asm volatile("" : : "r"(&k) : "memory");
	return TC_ACT_UNSPEC;
}

SEC("tc")
int floor16(struct __sk_buff *skb)
{
	struct key16 k;
	if (key16(&k))
		return TC_ACT_SHOT;
	asm volatile("" : : "r"(&k) : "memory");
	return TC_ACT_UNSPEC;
}
