// Package datapath is the kernel side of the agent: it loads the BPF object
// built from bpf/datapath.c (datapath_bpfel.o, committed, made by bpf2go),
// creates its maps once from one table (maps.go) and hands them to every
// program it loads, attaches the TC programs to interfaces (attach.go),
// starts the features' hooks (hooks.go), and owns the eviction protocol over
// the double-buffered maps (generations.go); metrics.go reads its counts,
// programs and maps for Prometheus. types.go gives the generated Go
// mirrors of bpf/types.h (FlowKey, FlowValue, EnrichValue, the counters,
// directions and flags) their Go names.
//
// Attachment prefers tcx links (Linux >= 6.6) at the head of each hook, and
// falls back to a clsact qdisc with a direct-action cls_bpf filter. Either
// way the programs return TC_ACT_UNSPEC (TCX_NEXT), so programs attached
// after them (Cilium's, for instance) still run and decide the packet's fate.
//
// Each observation carries its interface's network namespace cookie, so that
// interfaces with the same ifindex in different namespaces stay apart. The
// TC programs read the device's (skb->dev's net_cookie, the value
// SO_NETNS_COOKIE reports in user space), so one set, loaded by Load, serves
// every namespace. Where the kernel refuses that read, Load falls back to
// one set per namespace with the cookie as a load-time constant
// (SharedPrograms says which). bpf_get_netns_cookie(skb) is no substitute:
// in tc programs it reports the namespace of the packet's socket, or the
// initial namespace when there is none, not the device's.
package datapath
