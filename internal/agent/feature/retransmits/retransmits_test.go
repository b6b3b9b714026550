package retransmits_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// Random loss (nftables numgen) on one connection: its data flow shows
// retransmits; a clean connection shows none.
func TestRetransmits(t *testing.T) {
	p := agenttest.NewPair(t)
	netlab.Run(t, p.B, "nft", "add", "table", "inet", "fltest")
	netlab.Run(t, p.B, "nft", "add chain inet fltest in { type filter hook input priority 0; }")
	netlab.Run(t, p.B, "nft", "add rule inet fltest in tcp dport 7102 numgen random mod 5 == 0 drop")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	retransSegs := func() uint64 { return netlab.NetCounters(t, p.A, "snmp", "Tcp:")["RetransSegs"] }
	before := retransSegs()
	p.Transfer(t, 7101, 1<<20)
	cleanSegs := retransSegs() - before // a loaded 2-CPU host can make even a clean veth retransmit (reordering, loss probes)
	p.Transfer(t, 7102, 4<<20)
	flows := h.Stop()
	allSegs := retransSegs() - before
	_, _, clean, _, _, _ := agenttest.EnrichSum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 7101, Proto: 6})
	drops, _, lossy, _, causes, _ := agenttest.EnrichSum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 7102, Proto: 6})
	// One retransmit event is one skb, which may carry several segments.
	if (cleanSegs == 0 && clean != 0) || (cleanSegs != 0 && (clean == 0 || clean > cleanSegs)) {
		t.Fatalf("clean connection shows %d retransmits; the sender's TCP retransmitted %d segments", clean, cleanSegs)
	}
	// A record carries the cause of its flow's latest drop: netfilter's,
	// or TCP's own discard of a duplicate that a retransmission brought
	// after the original got through (TCP_OLD_SEQUENCE), whichever came
	// last in the period. (TestDropNetfilter checks the netfilter cause
	// alone.)
	if lossy == 0 || drops == 0 || !(causes["NETFILTER_DROP"] || causes["TCP_OLD_SEQUENCE"]) {
		t.Fatalf("lossy connection: retransmits=%d drops=%d causes=%v; want > 0, > 0, NETFILTER_DROP or TCP_OLD_SEQUENCE", lossy, drops, causes)
	}
	// An event is a retransmission the kernel sent (RetransSegs counts its
	// segments): never more events than segments. Kernels whose tracepoint
	// also fires for attempts that sent nothing (-EBUSY) fail here unless
	// those are skipped (bpf/retransmits.h).
	if clean+lossy > allSegs {
		t.Fatalf("%d + %d retransmits recorded, the senders' TCP retransmitted %d segments", clean, lossy, allSegs)
	}
	t.Logf("lossy connection: %d retransmits, %d drops", lossy, drops)
}
