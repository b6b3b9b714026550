package agent_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

func writeRules(t *testing.T, rules string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	return "--filter-rules=" + path
}

// Rules on live traffic, counted against what was sent: an accepted port
// exactly, a rejected port and an unmatched one (default reject) not at
// all, and a 1:10 rule statistically, with the rate in its records.
func TestFilterRulesLive(t *testing.T) {
	p := agenttest.NewPair(t)
	for _, port := range []string{"9000", "9001", "9002", "9003"} {
		agenttest.MustListen(t, p.B, p.IPB+":"+port)
	}
	rules := writeRules(t, `
- {name: keep, action: accept, destination_ports: 9000}
- {name: drop-9001, action: reject, ports: 9001}
- {name: tenth, action: accept, destination_ports: 9003, sampling: 10}
`)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), rules)
	const n, nSampled = 1000, 20000
	for _, s := range []struct {
		port string
		n    int
	}{{"9000", n}, {"9001", n}, {"9002", n}, {"9003", nSampled}} {
		if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":"+s.port, []byte("f"), s.n); err != nil {
			t.Fatal(err)
		}
	}
	// Each rule's matches, once per hook (veth-a egress, veth-b ingress),
	// before sampling: the flowlens_agent_filter_rule_packets_total source.
	got, err := h.A.DP.ReadFlowRuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{2 * n, 2 * n, 2 * nSampled}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] ||
		got[datapath.FlowRuleDefault] != 2*n {
		t.Errorf("rule counters %v, default %d; want %v, default %d", got[:3], got[datapath.FlowRuleDefault], want, 2*n)
	}
	// The same counts, as the metric exports them.
	mfs, err := h.A.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	metric := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "flowlens_agent_filter_rule_packets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var rule, action string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "rule":
					rule = l.GetValue()
				case "action":
					action = l.GetValue()
				}
			}
			metric[rule+"/"+action] = m.GetCounter().GetValue()
		}
	}
	wantMetric := map[string]float64{"keep/accept": 2 * n, "drop-9001/reject": 2 * n, "tenth/accept": 2 * nSampled, "default/reject": 2 * n}
	if fmt.Sprint(metric) != fmt.Sprint(wantMetric) {
		t.Errorf("flowlens_agent_filter_rule_packets_total: %v, want %v", metric, wantMetric)
	}
	flows := h.Stop()
	if pk, _, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9000, Proto: 17}); pk != n || recs[0].Sampling != 1 {
		t.Errorf("port 9000 (accept): %d packets, want %d", pk, n)
	}
	for _, port := range []uint16{9001, 9002} {
		if pk, _, _ := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: port, Proto: 17}); pk != 0 {
			t.Errorf("port %d (rejected): %d packets exported, want 0", port, pk)
		}
	}
	// Binomial(20000, 1/10): mean 2000, sigma 42.4; ±5 sigma.
	pk, _, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9003, Proto: 17})
	if sigma := math.Sqrt(nSampled * 0.1 * 0.9); math.Abs(float64(pk)-nSampled/10) > 5*sigma {
		t.Errorf("port 9003 (1:10): %d packets of %d sent, want %d ± %.0f", pk, nSampled, nSampled/10, 5*sigma)
	}
	for _, r := range recs {
		if r.Sampling != 10 {
			t.Errorf("port 9003 record says sampling %d, want 10", r.Sampling)
		}
	}
}

// A flow whose packets fall under two rates (every SYN, the rest 1:100)
// gets a record per rate, each exact for its rate: the SYN and the SYN-ACK
// alone at sampling 1, the rest only at sampling 100.
func TestFilterSamplingSplit(t *testing.T) {
	p := agenttest.NewPair(t)
	rules := writeRules(t, `
- {name: syn, action: accept, tcp_flags: SYN}
- {name: bulk, action: accept, sampling: 100}
`)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), rules, "--cache-active-timeout=1h")
	// 256 MiB: with TSO and GRO a packet of the transfer is a 64 KiB skb,
	// sampled as one, so some 4,000 data and 2,000 ACK skbs, 1 in 100 kept:
	// zero kept in either direction has odds below 1e-8.
	p.Transfer(t, 7000, 256<<20)
	flows := h.Stop()
	for _, m := range []agenttest.Match{{Src: p.IPA, Dst: p.IPB, Dport: 7000, Proto: 6}, {Src: p.IPB, Dst: p.IPA, Sport: 7000, Proto: 6}} {
		var full, sampled uint64
		for _, r := range flows {
			if !m.OK(r) {
				continue
			}
			switch r.Sampling {
			case 1:
				full += r.Packets
				if r.TCPFlags&0x02 == 0 {
					t.Errorf("%+v: the sampling 1 record has no SYN (flags %#x)", m, r.TCPFlags)
				}
			case 100:
				sampled += r.Packets
			default:
				t.Errorf("%+v: record with sampling %d, want 1 or 100", m, r.Sampling)
			}
		}
		t.Logf("%+v: %d packets at sampling 1, %d at sampling 100", m, full, sampled)
		if full != 1 {
			t.Errorf("%+v: %d packets at sampling 1, want exactly the SYN (or SYN-ACK)", m, full)
		}
		if sampled == 0 {
			t.Errorf("%+v: no packets at sampling 100 out of a 256 MiB transfer", m)
		}
	}
}

// A drops rule keeps exactly the flows that saw a kernel drop: datagrams to
// a closed port (NO_SOCKET) are exported, as a partial record with their
// drops, and those delivered to an open port are not.
func TestFilterDropsOnly(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	rules := writeRules(t, "- {name: drops, action: accept, drops: true}\n")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), rules, "--features=drops")
	const n, size = 13, 50
	for _, port := range []string{"9000", "9999"} {
		if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":"+port, make([]byte, size), n); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	flows := h.Stop()
	if pk, _, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9000, Proto: 17}); pk != 0 || len(recs) != 0 {
		t.Errorf("delivered flow exported (%d records, %d packets), want nothing", len(recs), pk)
	}
	m := agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4000, Dport: 9999, Proto: 17}
	drops, dropBytes, _, _, causes, partial := agenttest.EnrichSum(flows, m)
	if drops != n || dropBytes != n*(14+20+8+size) || !causes["NO_SOCKET"] || partial != 1 {
		t.Errorf("dropped flow: drops=%d bytes=%d causes=%v partial records=%d; want %d, %d, NO_SOCKET, 1",
			drops, dropBytes, causes, partial, n, n*(14+20+8+size))
	}
}

// A drops rule without the drop hook would keep nothing: refused at start.
func TestFilterDropsNeedsFeature(t *testing.T) {
	rules := writeRules(t, "- {name: drops, action: accept, drops: true}\n")
	_, err := config.Load([]string{"--features=rtt", rules}, nil)
	want := `filter rule 0 ("drops"): drops "true": needs the drops feature (--features with drops)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
}
