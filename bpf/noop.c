// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A TC program that does nothing: the floor for datapath benchmarks. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("tc")
int noop(struct __sk_buff *skb)
{
	return TC_ACT_UNSPEC;
}
