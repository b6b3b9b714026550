/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What a full map costs per packet (docs/design/faults.md, "The chaos case
 * TestNewFlowFlood"). Under a new-flow flood every packet of a flow without
 * an entry finds the flow map full, and every drop finds the enrichment map
 * full; the work below changes nothing that is counted, only what is done
 * to find it out again.
 *
 * Known full: a flow or enrichment map is emptied only while it is
 * inactive (docs/design/eviction.md, step 1), so once an insert into the
 * active map of generation g failed with E2BIG, every insert of a new key
 * into it fails until the flip. The programs note g + 1 in the map's
 * control slot (enum control_slot) and skip the insert while it says so:
 * the same outcome, without hashing the key into a locked bucket again. A
 * late program of an earlier generation may overwrite the note (a lost
 * hint: the next insert fails and writes it again), never make a map that
 * has room look full: the note names its generation.
 *
 * Wake-ups: a record submitted to the overflow ring with the default flags
 * wakes the reader whenever the ring was empty, which, with a reader that
 * keeps up, is nearly every record: an irq_work self-IPI each (in a VM, an
 * APIC write that exits to the hypervisor; the largest single cost of the
 * flood's per-packet path). The records are submitted without a wake-up
 * except the ones that take the unread data past a multiple of
 * OVERFLOW_WAKE_STEP; the agent's reader also polls (evictor.ringPoll), so
 * a record below the step waits at most that long, and the reader is never
 * left asleep on a filling ring.
 */
#ifndef FLOWLENS_FULL_H
#define FLOWLENS_FULL_H

#include "maps.h"

#define E2BIG_ 7

/* full_known: generation gen's map of slot (CTL_*_FULL) is known full. */
static __always_inline int full_known(__u32 slot, __u32 gen)
{
	__u32 *f = bpf_map_lookup_elem(&control, &slot);
	return f && *f == gen + 1;
}

/* full_note notes an insert's error: E2BIG means generation gen's map is full. */
static __always_inline void full_note(__u32 slot, __u32 gen, long err)
{
	if (err != -E2BIG_)
		return;
	__u32 *f = bpf_map_lookup_elem(&control, &slot);
	if (f && *f != gen + 1)
		*f = gen + 1;
}

/* A quarter of the overflow ring (maps.h), and a record's span in it. */
#define OVERFLOW_WAKE_STEP (1 << 18)
#define OVERFLOW_REC_SPAN ((sizeof(struct overflow_rec) + 8 + 7) & ~7)

/*
 * overflow_wake is the flags for submitting a reserved record: a forced
 * wake-up when the unread data, this record included, just passed a
 * multiple of OVERFLOW_WAKE_STEP, else none.
 */
static __always_inline __u64 overflow_wake(void)
{
	__u64 avail = bpf_ringbuf_query(&overflow, BPF_RB_AVAIL_DATA);
	return avail >= OVERFLOW_WAKE_STEP && (avail & (OVERFLOW_WAKE_STEP - 1)) < OVERFLOW_REC_SPAN ?
		       BPF_RB_FORCE_WAKEUP :
		       BPF_RB_NO_WAKEUP;
}

#endif
