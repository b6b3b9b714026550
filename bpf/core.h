/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types the enrichment programs read, declared with
 * preserve_access_index: the loader relocates every field access against
 * the running kernel's BTF (CO-RE), so only the names must match, not the
 * layouts. Fields nested in anonymous unions/structs in the kernel are found
 * by name.
 */
#ifndef FLOWLENS_CORE_H
#define FLOWLENS_CORE_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct in6_addr___fl {
	union {
		__u8 u6_addr8[16];
		__u32 u6_addr32[4];
	} in6_u; /* s6_addr is a macro for in6_u.u6_addr8 */
};

struct sock_common {
	__u32 skc_daddr;
	__u32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr___fl skc_v6_daddr;
	struct in6_addr___fl skc_v6_rcv_saddr;
	struct {
		struct net *net;
	} skc_net; /* possible_net_t */
};

struct dst_entry {
	struct net_device *dev;
};

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
	int sk_rx_dst_ifindex; /* 5.18+: the device its packets arrive on */
	struct dst_entry *sk_dst_cache; /* its output route */
};

struct tcp_sock {
	__u32 srtt_us; /* smoothed RTT in microseconds, << 3 */
};

struct net {
	__u64 net_cookie;
};

struct list_head___fl {
	struct list_head___fl *next;
};

struct rtnl_link_ops {
	const char *kind;
};

struct net_device {
	int ifindex;
	unsigned int flags; /* IFF_* */
	struct {
		struct net *net;
	} nd_net; /* possible_net_t */
	struct {
		struct list_head___fl upper;
		struct list_head___fl lower;
	} adj_list; /* devices stacked above (bridge, bond...) and below */
	const struct rtnl_link_ops *rtnl_link_ops;
};

struct skb_shared_info {
	__u16 gso_size;
	__u16 gso_segs;
};

struct sk_buff {
	struct net_device *dev;
	unsigned int len;
	__u8 encapsulation:1;
	__u32 vlan_all; /* non-zero: a VLAN tag held in the skb, not in the frame */
	__u16 inner_transport_header;
	__u16 transport_header;
	__u16 network_header;
	__u16 mac_header;
	__be16 protocol;
	unsigned int end; /* offset of skb_shared_info from head */
	unsigned char *head;
	unsigned char *data;
	struct sock *sk;
};

/* Conntrack (feature "xlat"): a connection's two tuples and NAT status. */
union nf_inet_addr {
	__u32 all[4];
	__be32 ip;
};

struct nf_conntrack_tuple {
	struct {
		union nf_inet_addr u3;
		union {
			__be16 all;
		} u;
	} src;
	struct {
		union nf_inet_addr u3;
		union {
			__be16 all;
		} u;
	} dst;
};

struct nf_conntrack_tuple_hash {
	struct nf_conntrack_tuple tuple;
};

struct nf_conntrack_zone {
	__u16 id;
};

struct nf_conn {
	struct nf_conntrack_zone zone;
	struct nf_conntrack_tuple_hash tuplehash[2]; /* [IP_CT_DIR_ORIGINAL], [IP_CT_DIR_REPLY] */
	unsigned long status;                        /* IPS_* */
};

#pragma clang attribute pop

/* The TC context's sk_buff (a kfunc the verifier inlines: no call). */
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;
/* The same pointer, untrusted (a kfunc the verifier inlines: a move). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/*
 * UNTRUSTED is p as an untrusted pointer to the kernel's type T, for
 * reading only (never for a helper or kfunc that wants p trusted). A
 * pointer field loaded from a trusted pointer costs the 6.18 verifier
 * linear scans of the kernel's BTF (btf_nested_type_is_trusted: a
 * <struct>__safe_trusted name lookup, in each verifier state that loads
 * it), from an untrusted one none (docs/benchmarks.md §27); but the load
 * becomes a fault-safe one (PROBE_MEM: the JIT adds an address check), so
 * it is used for those pointer fields only, off the TC fast path. 6.2+,
 * like bpf_cast_to_kern_ctx.
 */
#define UNTRUSTED(p, T) ((T *)bpf_rdonly_cast((p), bpf_core_type_id_kernel(T)))

#endif
