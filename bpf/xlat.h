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
 * xlat_lookup asks conntrack about the packet's flow and records a NAT
 * translation in the flow's enrichment entry. Returns 1 when conntrack
 * knows the flow (translated or not), so it need not be asked again this
 * generation; 0 when it does not (yet).
 */
static __noinline int xlat_lookup(struct __sk_buff *skb, const struct flow_key *k)
{
	if (k->proto != IPPROTO_TCP && k->proto != IPPROTO_UDP)
		return 1;
	struct bpf_sock_tuple t = {};
	__u32 tsz;
	int v4 = is_v4mapped(k->src_ip);
	if (v4) {
		t.ipv4.saddr = *(const __u32 *)&k->src_ip[12];
		t.ipv4.daddr = *(const __u32 *)&k->dst_ip[12];
		t.ipv4.sport = bpf_htons(k->src_port);
		t.ipv4.dport = bpf_htons(k->dst_port);
		tsz = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, k->src_ip, 16);
		__builtin_memcpy(t.ipv6.daddr, k->dst_ip, 16);
		t.ipv6.sport = bpf_htons(k->src_port);
		t.ipv6.dport = bpf_htons(k->dst_port);
		tsz = sizeof(t.ipv6);
	}
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
