package drops_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// UDP to a closed port: every datagram is dropped with NO_SOCKET, and the
// drops are merged into the flow the TC programs recorded. Both drop hooks
// are exercised: tp_btf/kfree_skb, and the classic tracepoint fallback.
func TestDropNoSocket(t *testing.T) {
	for _, tc := range []struct {
		name, program string
		skip          []string
	}{
		{"tp_btf", "drop_kfree_skb", nil},
		{"tracepoint", "drop_tracepoint", []string{"drop_kfree_skb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "tracepoint" {
				netlab.MountTracefs(t)
			}
			p := agenttest.NewPair(t)
			h := agenttest.Start(t, 2, agent.Options{SkipHookPrograms: tc.skip}, p.NetnsArg())
			if st := h.HookStatus("drops"); !st.Running || st.Program != tc.program {
				t.Fatalf("drops hook %+v, want running %s", st, tc.program)
			}
			const n, size = 17, 50
			if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9999", make([]byte, size), n); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			flows := h.Stop()
			m := agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4000, Dport: 9999, Proto: 17}
			drops, dropBytes, _, _, causes, partial := agenttest.EnrichSum(flows, m)
			pk, _, _ := agenttest.Sum(flows, m)
			if drops != n || dropBytes != n*(14+20+8+size) || len(causes) != 1 || !causes["NO_SOCKET"] {
				t.Fatalf("drops=%d bytes=%d causes=%v; want %d, %d, NO_SOCKET", drops, dropBytes, causes, n, n*(14+20+8+size))
			}
			if pk != n || partial != 0 {
				t.Fatalf("flow packets=%d partial records=%d; want %d and 0 (drops merged into the flow)", pk, partial, n)
			}
		})
	}
}

// An nftables drop rule: NETFILTER_DROP with exact packets and bytes; a
// flow of the same hosts on another port is untouched.
func TestDropNetfilter(t *testing.T) {
	p := agenttest.NewPair(t)
	netlab.Run(t, p.B, "nft", "add", "table", "inet", "fltest")
	netlab.Run(t, p.B, "nft", "add chain inet fltest in { type filter hook input priority 0; }")
	netlab.Run(t, p.B, "nft", "add", "rule", "inet", "fltest", "in", "udp", "dport", "9001", "drop")
	agenttest.MustListen(t, p.B, p.IPB+":9002")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	const n, size = 23, 80
	if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9001", make([]byte, size), n); err != nil {
		t.Fatal(err)
	}
	if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9002", make([]byte, size), n); err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	drops, dropBytes, _, _, causes, _ := agenttest.EnrichSum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9001, Proto: 17})
	if drops != n || dropBytes != n*(14+20+8+size) || !causes["NETFILTER_DROP"] || len(causes) != 1 {
		t.Fatalf("drops=%d bytes=%d causes=%v; want %d, %d, NETFILTER_DROP", drops, dropBytes, causes, n, n*(14+20+8+size))
	}
	if d, _, _, _, c, _ := agenttest.EnrichSum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9002, Proto: 17}); d != 0 || len(c) != 0 {
		t.Fatalf("accepted flow shows drops=%d causes=%v", d, c)
	}
}

// Packets dropped before any TC hook saw them (an nftables output rule in
// the sender's namespace): no watched interface carried them, so by
// default they make no record (their drops are counted as unwatched);
// with --enrich-unwatched their enrichment entry, which has no flow entry,
// is exported as a partial record with zero counters.
func TestPartialFlowFromDropsOnly(t *testing.T) {
	for _, unwatched := range []bool{false, true} {
		t.Run(fmt.Sprintf("enrich-unwatched=%v", unwatched), func(t *testing.T) { partialFlowFromDropsOnly(t, unwatched) })
	}
}

func partialFlowFromDropsOnly(t *testing.T, unwatched bool) {
	p := agenttest.NewPair(t)
	netlab.Run(t, p.A, "nft", "add", "table", "inet", "fltest")
	netlab.Run(t, p.A, "nft", "add chain inet fltest out { type filter hook output priority 0; }")
	netlab.Run(t, p.A, "nft", "add", "rule", "inet", "fltest", "out", "udp", "dport", "9003", "drop")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), fmt.Sprintf("--enrich-unwatched=%v", unwatched))
	const n, size = 9, 40
	err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9003", make([]byte, size), n)
	if err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Fatalf("send through an output drop rule: %v, want EPERM", err)
	}
	// The first send fails; send the others one by one.
	for i := 1; i < n; i++ {
		_ = netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9003", make([]byte, size), 1)
	}
	skipped, err := h.A.DP.ReadEnrichmentUnwatched()
	if err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	m := agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4000, Dport: 9003, Proto: 17}
	drops, dropBytes, _, _, causes, partial := agenttest.EnrichSum(flows, m)
	pk, by, recs := agenttest.Sum(flows, m)
	if !unwatched {
		// The drop hook sees the whole host: other drops may add to it.
		if len(recs) != 0 || skipped < n {
			t.Fatalf("records %+v, %d unwatched drops; want none, at least %d", recs, skipped, n)
		}
		return
	}
	if drops != n || dropBytes != n*(20+8+size) || !causes["NETFILTER_DROP"] {
		t.Fatalf("drops=%d bytes=%d causes=%v; want %d, %d (no L2 header yet), NETFILTER_DROP", drops, dropBytes, causes, n, n*(20+8+size))
	}
	if partial != 1 || len(recs) != 1 || pk != 0 || by != 0 || len(recs[0].Interfaces) != 0 {
		t.Fatalf("want one partial record with zero counters and no interfaces, got %+v", recs)
	}
}
