/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The datapath's clock. The TC programs stamp flows with jiffies, the
 * kernel's tick counter: bpf_jiffies64() is inlined by the verifier into one
 * load, where bpf_ktime_get_coarse_ns() is two calls and a seqcount read of
 * the timekeeper, about a sixth of a counting hook's time on live traffic
 * (docs/benchmarks.md §9). The resolution is the same: the coarse clock
 * also moves once per tick.
 *
 * flowlens_clock reads jiffies and CLOCK_MONOTONIC at once for the agent
 * (internal/agent/datapath/clock.go), which runs it with BPF_PROG_TEST_RUN on a
 * dummy frame and reads them from the frame it returns. The kernel
 * advances jiffies from CLOCK_MONOTONIC (jiffy j begins at base +
 * j * TICK_NSEC), so the agent, running it until jiffies moves twice,
 * learns base and the tick length, which convert every timestamp.
 */
#ifndef FLOWLENS_CLOCK_H
#define FLOWLENS_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

SEC("tc")
int flowlens_clock(struct __sk_buff *skb)
{
	struct clock_sample s = {
		.jiffies = bpf_jiffies64(),
		.mono_ns = bpf_ktime_get_ns(),
	};
	bpf_skb_store_bytes(skb, 0, &s, sizeof(s), 0);
	return 0;
}

#endif
