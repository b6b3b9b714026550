// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Benchmark driver for BPF_PROG_TEST_RUN (hack/bench/bpf, not part of the
 * agent). BPF_PROG_TEST_RUN repeats one program on one skb, so every run of
 * the real TC program would hit the same flow, in a warm cache. The driver
 * is run instead: before each run it rewrites the last four bytes of the
 * packet's source address with the next flow index (a stride through
 * [first, first+n), so consecutive runs touch unrelated hash buckets), then
 * tail-calls the program under test (target[0]: flowlens_ingress, or the
 * no-op floor). Packet writes persist across the repetitions of one test run.
 *
 * Both the floor and the real program are measured through the driver, so
 * the driver's own cost (a few ns) is in the floor, not in the difference.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target SEC(".maps");

volatile const __u32 addr_off = 26; /* offset of the 4 rewritten bytes (14+12 for IPv4, 14+8+12 for IPv6) */
volatile const __u32 base = 0;      /* added to the index (IPv4: 10.0.0.0) */
volatile const __u32 first = 0;
volatile const __u32 n = 1;         /* flows cycled through */
volatile const __u32 stride = 0;    /* < n, coprime with n */

__u32 idx; /* position in [0, n); persists across runs */

SEC("tc")
int driver(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 off = addr_off;

	if (off > 64)
		return TC_ACT_SHOT;
	__u32 *a = data + off;
	if ((void *)(a + 1) > data_end)
		return TC_ACT_SHOT;
	__u32 i = idx + stride;
	if (i >= n)
		i -= n;
	idx = i;
	*a = bpf_htonl(base + first + i);
	bpf_tail_call(skb, &target, 0);
	return TC_ACT_SHOT; /* tail call failed: the Go side checks the return value */
}
