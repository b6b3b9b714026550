/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Shared kernel/user-space types and constants of the flowlens datapath.
 *
 * Everything here reaches Go through bpf2go (-type, internal/agent/datapath/gen.go):
 * the structs as generated Go types, the enums as generated constants, so no
 * number is written twice. Struct field order leaves no implicit padding
 * holes (explicit _pad fields are always zero): a hole would make the key
 * hash depend on stack garbage, and would make Go and C disagree on the layout.
 */
#ifndef FLOWLENS_TYPES_H
#define FLOWLENS_TYPES_H

#include <linux/types.h>
#include <linux/bpf.h>

#define MAX_IFACES 6

/* Directions (pkg/flow's Direction has the same values: checked at compile
 * time in internal/agent/evictor). BOTH: one interface saw the flow both ways. */
enum direction {
	DIR_INGRESS = 1,
	DIR_EGRESS = 2,
	DIR_BOTH = 3,
};

/* TCP flag markers above the eight header flags (pkg/flow.TCPFlagSynAck...,
 * checked at compile time in internal/agent/evictor). */
enum tcp_markers {
	TCP_SYN_ACK = 0x100,
	TCP_FIN_ACK = 0x200,
	TCP_RST_ACK = 0x400,
	/* A segment advertising a zero window (not a SYN or RST): set by
	 * parse for feature "tcp", cleared by the TC programs before the
	 * flow map, so it never reaches a flow (bpf/tcp.h). */
	TCP_ZERO_WIN = 0x800,
};

/* Per-CPU counters (index into the "counters" map). */
enum counter {
	CNT_NON_IP = 0,         /* frames that are not IPv4/IPv6: ignored */
	CNT_MALFORMED = 1,      /* IP version or IPv4 IHL invalid: no flow (bpf/parse.h) */
	CNT_IFACES_OVERFLOW = 2,/* a seventh interface could not be recorded */
	CNT_OVERFLOW_RECORDS = 3,/* flow map full: packet sent to the ring buffer */
	CNT_OVERFLOW_LOST = 4,  /* flow map full and ring buffer full: lost, counted */
	CNT_NEW_FLOWS = 5,      /* entries inserted into the flow maps (map fill = new since the flip) */
	CNT_FRAG_UNMATCHED = 6, /* sightings (per hook) of later fragments whose first was not seen: port 0 */
	CNT_FILTER_REJECTED = 7,/* packets a filter rule (or the default action) rejected */
	CNT_SAMPLED_OUT = 8,    /* packets accepted but not sampled (1 in rate is kept) */
	CNT_SAMPLING_SPLIT = 9, /* packets counted under another rate than their flow's: sent as ORDER_SPLIT records */
	CNT_TRUNCATED = 10,     /* Ethernet, VLAN or fixed IP header truncated: no addresses, no flow */
	CNT_MAX = 11,
};

/* flow_value.flags */
enum flow_flags {
	FLOW_F_IFACES_OVERFLOW = 0x1, /* a seventh interface could not be recorded */
	FLOW_F_FRAG_UNMATCHED = 0x2,  /* IP fragments counted here without their first fragment's ports */
	FLOW_F_XLAT_DONE = 0x4,       /* conntrack was asked about the flow this generation (bpf/xlat.h) */
	/* Packets counted here whose headers the parser could not read to
	 * the end (bpf/parse.h): keyed on their addresses and the last
	 * protocol read, ports 0. */
	FLOW_F_L4_UNREAD = 0x8,  /* the TCP/UDP/SCTP/ICMP header: truncated, a tiny first fragment, TCP offset < 5 */
	FLOW_F_EXT_UNREAD = 0x10, /* IPv4 options or IPv6 extension headers: truncated, past the window, > 6 */
	/* Feature "xlat": not a flow but a tuple after NAT naming its flow
	 * (struct xlat_flow_alias, bpf/xlat.h); no record (evictor/xlat.go). */
	FLOW_F_XLAT_ALIAS = 0x20,
	FLOW_F_XLAT_DEAD = 0x40, /* that alias is stale: its tuple is a flow of its own (ring) */
	/* Feature "xlat": the packets after NAT of this flow's counting
	 * observation may be counted in an alias (bpf/xlat.h, xlat_delegate;
	 * also set by a take-over, xlat_handover, so that none starts after
	 * it); the evictor adds that alias's counts to this flow's record. */
	FLOW_F_XLAT_VIA = 0x80,
};

/*
 * Where a hook stands on a packet's way through the node (bpf/order.h):
 * ORDER_FIRST, certainly the first observed hook, so the packet counts here;
 * ORDER_UNKNOWN, decided by the flow's counting observation.
 */
enum hook_order {
	ORDER_UNKNOWN = 0,
	ORDER_FIRST = 1,
	/* An overflow record of a packet counted at its flow's counting hook
	 * under another sampling rate than the flow's (bpf/filter.h): it counts,
	 * in its own record for (flow, rule). */
	ORDER_SPLIT = 2,
	/* An overflow record of a packet that does not count: the previous
	 * generation's map counted its flow on another observation (the
	 * record's "was"), where this packet was counted before the flip
	 * (bpf/flows.h, insert). The aggregation lists it, and a flow it
	 * creates counts on "was", as the fresh map would have. */
	ORDER_INHERITED = 3,
};

/* Flow filter rules (bpf/filter.h): at most 64, one bit each. */
enum filter_size {
	FILTER_MAX_RULES = 64,
	FILTER_DEFAULT = 64, /* filter_counters index of the default action */
	FILTER_COUNTERS = 65,
};

/* filter_used bits: the lookups the rules need (the others are not compiled in). */
enum filter_use {
	FILTER_USE_ADDR = 0x1, /* IPv6 addresses: filter_addr; IPv4: filter_v4 */
	FILTER_USE_PORTS = 0x2,
	FILTER_USE_ICMP = 0x4,
	FILTER_USE_TCP_FLAGS = 0x8,
	FILTER_USE_IFACES = 0x10,
};

/*
 * The slots of the "control" array. CTL_GEN is the generation counter (the
 * agent's: internal/agent/datapath, Generations). CTL_OVERFLOWED + g % 2 is g + 1
 * once generation g sent a packet to the overflow ring (0: never), written
 * by the TC programs: the next generation looks up the ring's memory
 * (overflow_seen) only when its predecessor overflowed (bpf/flows.h,
 * insert), so a node whose map never fills pays one array read per new
 * flow. One slot per parity, so that a late program of the previous
 * generation cannot overwrite the current one's.
 *
 * CTL_FLOWS_FULL and CTL_ENRICH_FULL are g + 1 once generation g's flow
 * (enrichment) map refused an insert because it was full (bpf/full.h): a
 * map is emptied only while it is inactive, so it stays full for the rest
 * of its generation, and the programs skip the insert that would fail.
 */
enum control_slot {
	CTL_GEN = 0,
	CTL_OVERFLOWED = 1,
	CTL_FLOWS_FULL = 3,
	CTL_ENRICH_FULL = 4,
	CTL_SLOTS = 5,
};

/* Per-CPU counters of the enrichment hooks (index into "enrich_counters"). */
enum enrich_counter {
	ENRICH_LOST = 0, /* events whose entry could not be inserted (map full, allocator failed) */
	ENRICH_DNS_FULL = 1, /* DNS queries not tracked: dns_pending was full (bpf/dns.h) */
	ENRICH_UNWATCHED = 2, /* drops, RTT samples, retransmits of flows no watched interface carried (bpf/enrich.h) */
	ENRICH_DNS_ANSWERS_LOST = 3, /* DNS answers not handed to the agent: ring dns_answers full (bpf/dns.h) */
	ENRICH_CNT_MAX = 4,
};

/* The 7-tuple and a zone. IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d). */
struct flow_key {
	__u8 src_ip[16];
	__u8 dst_ip[16];
	__u16 src_port;
	__u16 dst_port;
	__u8 proto;
	__u8 icmp_type;
	__u8 icmp_code;
	/* Which namespaces' packets may share the flow (bpf/zone.h): the
	 * address domain's, or a loopback device's namespace's own zone. */
	__u8 zone;
};

/* One observation point: (network namespace cookie, ifindex) and direction. */
struct iface_obs {
	__u64 netns;
	__u32 ifindex;
	__u32 dir;
};

struct flow_value {
	/*
	 * The first 40 bytes share a cache line with the key's tail: the
	 * element (htab_elem's 48-byte header, the 40-byte key, this value) is
	 * 256 bytes, so every element of the preallocated map starts a cache
	 * line, and this block is what the per-packet fast path reads and
	 * writes besides ifaces[0] (docs/benchmarks.md §9).
	 */
	struct bpf_spin_lock lock;
	__u8 first_dir; /* direction of the counting observation; ifaces[0].dir may become BOTH */
	/* Bit i: ifaces[i] is known not to be the first hook of this flow's
	 * packets (a listed hook: checked once per generation, not per packet). */
	__u8 listed_only;
	__u8 n_ifaces;  /* valid entries in ifaces */
	__u8 flags;     /* FLOW_F_* */
	/* An 8-byte word changed only by an atomic OR of TCP flags
	 * (bpf/flows.h, or_tcp_flags): the rest is written at insertion. */
	__u16 tcp_flags;
	__u16 eth_type;
	__u8 dscp;
	/* The filter rule (bpf/filter.h) the flow's packets were sampled
	 * under: its index + 1, or 0 for the default action's traffic. */
	__u8 rule;
	__u8 _pad[2];
	__u64 bytes;   /* wire bytes of the counted packets (docs/design/counting.md) */
	__u64 packets; /* wire packets counted (a GSO/GRO buffer counts as its segments) */
	__u64 last_seen; /* jiffies (bpf/clock.h) */
	struct iface_obs ifaces[MAX_IFACES]; /* ifaces[0]: the counting observation */
	__u64 first_seen; /* jiffies (bpf/clock.h) */
	__u8 src_mac[6];
	__u8 dst_mac[6];
	__u8 _pad2[12]; /* to 168 bytes: a 256-byte element */
};

/*
 * The flow filter's classifier tables (bpf/filter.h; internal/agent/flowrules
 * compiles them). Bit i of every mask is the rule of precedence i; a rule
 * that does not constrain a field has its bit set for every value of it.
 */
struct filter_conf {
	__u64 proto[256];     /* by IP protocol */
	__u64 icmp_type[256]; /* ICMP/ICMPv6 packets, by type */
	__u64 icmp_code[256]; /* ICMP/ICMPv6 packets, by code */
	__u64 tcp_flags[256]; /* TCP packets, by the header's flag byte */
	__u64 dir[2];         /* [0] ingress, [1] egress */
	__u64 no_any_ports;   /* rules without "ports" (either side) */
	__u64 port_free;      /* rules without port constraints: packets without ports */
	__u64 icmp_free;      /* rules without ICMP constraints: non-ICMP packets */
	__u64 tcp_free;       /* rules without TCP flags: non-TCP packets */
	__u64 iface_free;     /* rules without interfaces: interfaces not in filter_ifaces */
	__u64 accept;         /* rules whose action is accept */
	__u32 sampling[FILTER_MAX_RULES]; /* each rule's rate (>= 1) */
	__u32 default_sampling;           /* the default action's rate */
	__u32 default_accept;             /* 1: unmatched packets are accepted */
};

/* filter_addr (LPM trie): prefixes of the rules' CIDRs, IPv4-mapped. */
struct filter_addr_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct filter_addr_bits {
	__u64 cidr; /* rules whose cidr holds the address, or that have none */
	__u64 peer; /* the same for peer_cidr */
};

/*
 * filter_v4: the same bits for IPv4 addresses, as a multibit trie with
 * strides 16, 8, 8 in one array: entry a >> 16 first; a nonzero next is
 * the start of the 256 entries for the next byte. Two or three array reads,
 * inlined, where the LPM trie is a helper call walking 16-byte keys.
 */
struct filter_v4_entry {
	__u64 cidr;
	__u64 peer;
	__u32 next;
	__u32 _pad;
};

/* filter_ports: by port number. */
struct filter_port_bits {
	__u64 src; /* rules whose source_ports hold the port, or that have none */
	__u64 dst; /* the same for destination_ports */
	__u64 any; /* rules whose "ports" hold the port */
};

/* filter_ifaces: the rules naming an interface, by observation point. */
struct filter_iface_key {
	__u64 netns;
	__u32 ifindex;
	__u32 _pad; /* always 0 */
};

/* A packet that found the flow map full, sent whole through the ring buffer. */
struct overflow_rec {
	struct flow_key key;
	struct iface_obs iface;
	__u64 ts; /* jiffies (bpf/clock.h) */
	__u32 bytes;   /* wire bytes */
	__u32 packets; /* wire packets (GSO segments) */
	__u16 eth_type;
	__u16 tcp_flags;
	__u8 src_mac[6];
	__u8 dst_mac[6];
	__u8 dscp;
	__u8 order; /* enum hook_order */
	__u8 flags; /* FLOW_F_FRAG_UNMATCHED, FLOW_F_L4_UNREAD, FLOW_F_EXT_UNREAD */
	__u8 rule;  /* flow_value.rule: the filter rule it was sampled under */
	__u8 _pad[4];
	struct iface_obs was; /* ORDER_INHERITED: the flow's counting observation; else 0 */
};

/* Fragment memory (map "frags"): a datagram is (addresses, protocol, IP ID). */
struct frag_key {
	__u8 src_ip[16];
	__u8 dst_ip[16];
	__u32 id;
	__u8 proto;
	__u8 _pad[3]; /* always 0 */
};

/* The first fragment's L4 identity: the last 8 bytes of its flow_key
 * (remembered before the zone is set: zone 0). */
struct frag_l4 {
	__u16 src_port;
	__u16 dst_port;
	__u8 proto;
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 zone;
};

/* Feature "xlat" (bpf/xlat.h): the flow key of a packet after NAT's tuple,
 * its tuple before NAT (map xlat_alias). */
struct xlat_alias_value {
	struct flow_key key; /* the canonical key: the packet before NAT */
	__u64 netns;         /* the namespace whose conntrack confirmed it */
	__u32 gen;           /* the generation it was last confirmed in */
	__u32 _pad;          /* always 0 */
};

/* Feature "xlat" (bpf/xlat.h): a flow map entry under a tuple after NAT
 * (FLOW_F_XLAT_ALIAS): a struct flow_value whose header (lock,
 * listed_only, n_ifaces, flags) and ifaces[0..2] keep their meaning (the
 * hooks known listed in the flow it names, so that they stop at steady),
 * the rest names the flow. */
struct xlat_flow_alias {
	struct bpf_spin_lock lock;
	__u8 first_dir;   /* 0, or the delegated counting observation's */
	__u8 listed_only; /* bit 0 set: not a counting observation (clear: delegated) */
	__u8 n_ifaces;    /* 1 + the mirrored listed hooks, at most 3 */
	__u8 flags;       /* FLOW_F_XLAT_ALIAS, _DEAD, _DONE (delegation decided) */
	/* A flow's tcp_flags .. last_seen: zero, or, delegated, the counts of
	 * the packets counted here (bpf/xlat.h, xlat_delegate). */
	__u8 _pad[32];
	struct iface_obs ifaces[3]; /* [0] zero, or the delegated counting hook; [1..2] listed hooks */
	struct xlat_alias_value to; /* the flow's key, the confirming namespace and generation */
	__u8 _pad2[24];
};

/*
 * What the enrichment hooks (drops, RTT, retransmits) record per flow, keyed
 * by the flow's key in the enrichment maps. One shared hash (not per-CPU), no
 * preallocation: entries are few next to flows, and a per-CPU value would
 * multiply their memory by the CPU count and make the agent fold them.
 * Concurrency: RTT and retransmit updates of one flow run under its TCP
 * socket's lock, so plain stores are race-free; drops of one flow can hit
 * several CPUs at once, so their counters use atomic adds (the "latest"
 * cause/state/flags are plain stores: last writer wins).
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
	__u8 xlat;        /* 1: the xlat_* fields hold conntrack's translation (bpf/xlat.h) */
	__u8 xlat_src[16]; /* the flow's source after NAT (IPv4-mapped) */
	__u8 xlat_dst[16]; /* its destination after NAT */
	__u16 xlat_sport;
	__u16 xlat_dport;
	__u16 xlat_zone;   /* the conntrack zone */
	__u16 tls_version; /* negotiated (ServerHello, supported_versions) */
	__u16 tls_cipher;  /* the ServerHello's cipher suite */
	__u16 tls_group;   /* the ServerHello's key_share group */
	__u8 tls_flags;    /* TLS_F_* (bpf/tls.h) */
	__u8 _pad[3];
	/* Feature "dns" (bpf/dns.h): on the query's flow, the query and its
	 * answer's latency; on the answer's flow, the answer. */
	__u64 dns_query_ns;       /* CLOCK_MONOTONIC of the query's first sighting; 0: no query */
	__u64 dns_latency_ns;     /* query to answer, last */
	__u64 dns_latency_max_ns;
	__u16 dns_id;
	__u16 dns_flags;          /* the last message's flags word (the answer's, once answered) */
	__u8 dns_state;           /* DNS_S_* */
	__u8 _pad2[3];
	__u8 dns_name[64];        /* the question's name as on the wire, zero-padded */
	/* Overlays (bpf/tunnel.h, overlay_on; not a feature: written
	 * whenever the enrichment maps are read): the tunnel the flow's
	 * packets crossed a watched interface in, as its outer header said. */
	__u8 tun_src[16];         /* outer source (IPv4-mapped) */
	__u8 tun_dst[16];         /* outer destination */
	__u32 tun_vni;            /* VXLAN/Geneve network identifier; 0 for IP-in-IP */
	__u8 tun_type;            /* enum tunnel_type; 0: no tunnel seen */
	__u8 _pad3[3];
	/* Feature "tcp" (bpf/tcp.h): what the flow's source did; the
	 * counters take atomic adds (a flow's segments hit several CPUs). */
	__u64 tcp_connects;
	__u64 tcp_refused;
	__u64 tcp_timeouts;
	__u64 tcp_syn_retrans;
	__u64 tcp_resets;
	__u64 tcp_zero_windows;
	__u64 tcp_handshake_ns;     /* SYN to SYN-ACK, last */
	__u64 tcp_handshake_max_ns;
	__u8 tcp_role;              /* enum tcp_role; 0: unknown */
	__u8 _pad4[7];
};

/* enrich_value.tun_type: the encapsulations bpf/tunnel.h reads through. */
enum tunnel_type {
	TUN_VXLAN = 1,  /* UDP 4789, or 8472 (flannel, Linux's default) */
	TUN_GENEVE = 2, /* UDP 6081 */
	TUN_IPIP = 3,   /* IP protocol 4 (IPv4 inside) or 41 (IPv6 inside), outer IPv4 or IPv6 */
};

/* enrich_value.tcp_role (pkg/flow.TCPRole has the same values). */
enum tcp_role {
	TCP_ROLE_CLIENT = 1,
	TCP_ROLE_SERVER = 2,
};

/* A TCP connection the TC programs saw open (map tcp_conns, bpf/tcp.h),
 * keyed by the canonical one of its two flows (bpf/tcp.h, tcp_canon). */
struct tcp_conn {
	__u64 syn_ns;  /* CLOCK_MONOTONIC of its first SYN; 0: not seen */
	__u64 last_ns; /* of its last SYN: the agent's sweep of abandoned connects */
	__u64 state;   /* TCP_C_*, changed by atomic OR */
	/* A pending connect's last SYN drop (enrich_value.drop_*), kept for
	 * its timeout's record, which may come periods later. */
	__u32 drop_cause;
	__u16 drop_tcp_flags;
	__u8 drop_tcp_state;
	__u8 _pad;
};

enum tcp_conn_state {
	TCP_C_OPEN = 0x1, /* answered by a SYN-ACK */
	TCP_C_FIN = 0x2,  /* a FIN was seen: a new SYN on the tuple is a new connection */
	TCP_C_CLIENT_FWD = 0x4, /* the client is the key's source (else its destination) */
};

/* enrich_value.dns_state */
enum dns_state {
	DNS_S_QUERY = 0x1,    /* a query was seen on this flow */
	DNS_S_ANSWERED = 0x2, /* its answer was seen: dns_latency_ns is set */
	DNS_S_ANSWER = 0x4,   /* an answer was seen on this flow */
	DNS_S_TIMEOUT = 0x8,  /* set by the agent, never the kernel: a query of the flow timed out */
};

/* A DNS query awaiting its answer (map dns_pending, bpf/dns.h). */
struct dns_pending_key {
	struct flow_key key; /* the query's flow */
	__u16 id;
	__u8 _pad[6]; /* always 0 */
};

/* What dns_pending keeps of the query, so that the agent can report its
 * timeout in a later period, when the flow may have no packet (and so no
 * enrichment entry) left. */
struct dns_pending_value {
	__u64 query_ns; /* CLOCK_MONOTONIC of its first sighting; 0: being written */
	__u16 flags;    /* its flags word */
	__u8 _pad[6];
	__u8 name[64];  /* its name as on the wire (enrich_value.dns_name) */
};

/* enrich_value.tls_flags (feature "tls", bpf/tls.h) */
enum tls_flags {
	TLS_F_CLIENT_HELLO = 0x1, /* a ClientHello was seen on the flow */
	TLS_F_SERVER_HELLO = 0x2, /* a ServerHello: version, cipher and group are set */
	TLS_F_QUIC = 0x4,         /* a QUIC long-header packet was seen on the flow (UDP) */
};

/*
 * Per-socket memory of the RTT hook (bpf/rtt.h, map rtt_seen): the srtt it last stored in
 * an enrichment entry and the generation of that entry's map.
 */
struct rtt_sample {
	__u32 srtt_us;
	__u32 gen;
};

/*
 * One reading of the kernel's tick counter and CLOCK_MONOTONIC together
 * (bpf/clock.h): how the agent converts the datapath's jiffies.
 */
struct clock_sample {
	__u64 jiffies;
	__u64 mono_ns; /* CLOCK_MONOTONIC */
};

#endif
