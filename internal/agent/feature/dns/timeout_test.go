package dns_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/feature/dns"
	"github.com/flowlens/flowlens/internal/agent/feature/dns/dnsopt"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

const evictionsMetric = "flowlens_agent_dns_pending_evictions_total"

// With the defaults everywhere (a 5 s period, a 5 s --dns-timeout), ten
// queries to a server that never answers are each reported exactly once as
// a timeout, in the record of the period in which their timeout expired (a
// record of the query's flow without a packet: the query was sent in the
// period before), with their id and name; ten queries answered at once are
// never timeouts. The agent's metric counts exactly the ten removed as
// timed out, and none refused.
func TestDNSTimeoutsWithDefaults(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":53") // a DNS server that never answers
	netlab.SlowDNS(t, p.A, p.IPA+":53", 0)    // one that answers at once
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=dns")

	const n = 10
	sent := map[uint16]time.Time{} // source port → when its query went
	for i := range n {
		sport := 41000 + i
		sent[uint16(sport)] = time.Now()
		rc, err := netlab.AskDNS(p.A, fmt.Sprintf("%s:%d", p.IPA, sport), p.IPB+":53",
			netlab.DNSQuery(uint16(0x100+i), fmt.Sprintf("q%d.unanswered.test", i)), 20*time.Millisecond)
		if err != nil || rc != -1 {
			t.Fatalf("query %d: rcode %d (%v), want no answer", i, rc, err)
		}
		rc, err = netlab.AskDNS(p.B, fmt.Sprintf("%s:%d", p.IPB, 42000+i), p.IPA+":53",
			netlab.DNSQuery(uint16(0x200+i), fmt.Sprintf("q%d.answered.test", i)), time.Second)
		if err != nil || rc != 0 {
			t.Fatalf("answered query %d: rcode %d (%v), want 0", i, rc, err)
		}
	}
	// Wait for the ten timeouts (at most two periods after the last
	// query), then one more period, in which none may come again.
	timeouts := func(flows []agenttest.JSONFlow) (k int) {
		for _, f := range flows {
			if f.DNSTimeout {
				k++
			}
		}
		return
	}
	deadline := time.Now().Add(2*dnsopt.DefaultTimeout + 5*time.Second)
	for timeouts(agenttest.ParseFlows(t, h.Output())) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timeouts reported, want %d", timeouts(agenttest.ParseFlows(t, h.Output())), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // one more default period
	fams := promtest.GatherFrom(t, h.A.Metrics.Registry())
	promtest.Expect(t, fams, n, evictionsMetric, "reason=timeout")
	promtest.Expect(t, fams, 0, evictionsMetric, "reason=full")
	flows := h.Stop()
	if got := timeouts(flows); got != n {
		t.Errorf("%d records say dns_timeout, want %d", got, n)
	}
	for i := range n {
		sport := uint16(41000 + i)
		var recs []agenttest.JSONFlow
		var packets uint64
		for _, f := range flows {
			if f.SrcAddr == p.IPA && f.SrcPort == sport && f.DstPort == 53 {
				packets += f.Packets
				if f.DNSTimeout {
					recs = append(recs, f)
				}
			}
		}
		if packets != 1 || len(recs) != 1 {
			t.Errorf("query %d: %d packets, %d timeout records; want 1 and 1", i, packets, len(recs))
			continue
		}
		r := recs[0]
		if r.DNSID != uint16(0x100+i) || r.DNSName != fmt.Sprintf("q%d.unanswered.test", i) || r.DNSRcode != "" || r.DNSLatencyNs != 0 {
			t.Errorf("query %d: timeout record id %#x name %q rcode %q latency %d", i, r.DNSID, r.DNSName, r.DNSRcode, r.DNSLatencyNs)
		}
		// Reported by the first eviction after the timeout expired: a
		// record without packets is stamped with that eviction's time.
		if r.Packets == 0 {
			at, _ := time.Parse(time.RFC3339Nano, r.EndTime)
			t.Logf("query %d (id %#x): its timeout in a record without packets, %v after the query", i, r.DNSID, at.Sub(sent[sport]).Round(time.Millisecond))
			if d := at.Sub(sent[sport]); d < dnsopt.DefaultTimeout || d > dnsopt.DefaultTimeout+5*time.Second+time.Second {
				t.Errorf("query %d: timeout reported %v after the query, want within one period after %v",
					i, d, dnsopt.DefaultTimeout)
			}
		}
	}
	for _, f := range flows {
		if f.DstAddr == p.IPA && f.DstPort == 53 && f.DNSName != "" && (f.DNSTimeout || f.DNSLatencyNs == 0) {
			t.Errorf("answered query %q: timeout %v latency %d", f.DNSName, f.DNSTimeout, f.DNSLatencyNs)
		}
	}
}

// The table of pending queries holds dns.PendingQueries: the queries beyond
// it are not tracked and are counted exactly, once each however many hooks
// see them (the flow's counting hook counts), and those it holds are each
// removed once as timed out.
func TestDNSPendingTableBound(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":53")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=dns", "--dns-timeout=1s", "--cache-active-timeout=1s")
	const extra = 100
	var sent int
	if err := p.A.Do(func() error {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(p.IPA), Port: 43000})
		if err != nil {
			return err
		}
		defer c.Close()
		to := &net.UDPAddr{IP: net.ParseIP(p.IPB), Port: 53}
		for id := range dns.PendingQueries + extra {
			if _, err := c.WriteToUDP(netlab.DNSQuery(uint16(id), "bound.test"), to); err != nil {
				return err
			}
			sent++
		}
		return nil
	}); err != nil {
		t.Fatalf("after %d queries: %v", sent, err)
	}
	// Every query sent is removed once, as a timeout, or was refused.
	deadline := time.Now().Add(15 * time.Second)
	for {
		fams := promtest.GatherFrom(t, h.A.Metrics.Registry())
		if v, _ := promtest.Value(fams, evictionsMetric, "reason=timeout"); v >= dns.PendingQueries || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fams := promtest.GatherFrom(t, h.A.Metrics.Registry())
	promtest.Expect(t, fams, extra, evictionsMetric, "reason=full")
	promtest.Expect(t, fams, dns.PendingQueries, evictionsMetric, "reason=timeout")
	flows := h.Stop()
	full, _ := promtest.Value(fams, evictionsMetric, "reason=full")
	timedOut, _ := promtest.Value(fams, evictionsMetric, "reason=timeout")
	t.Logf("%d queries sent: %v refused (full), %v timed out", sent, full, timedOut)
	packets, _, _ := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 43000, Dport: 53, Proto: 17})
	if packets != uint64(sent) || sent != dns.PendingQueries+extra {
		t.Errorf("the agent counted %d query packets, %d sent; want %d", packets, sent, dns.PendingQueries+extra)
	}
}

// An answer later than --dns-timeout is reported once either way: matched
// by the kernel before an eviction removed its query (the record has the
// latency, and says dns_timeout: the query waited longer than the timeout),
// or after an eviction reported the timeout (the answer finds nothing to
// match: no latency, and the timeout is not reported again).
func TestDNSLateAnswers(t *testing.T) {
	for _, c := range []struct {
		name    string
		period  string
		swept   float64 // the metric's timeouts
		latency bool    // the timeout record carries the latency
	}{
		{"answer-first", "5s", 0, true},
		{"sweep-first", "100ms", 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := agenttest.NewPair(t)
			const delay = 600 * time.Millisecond
			netlab.SlowDNS(t, p.B, p.IPB+":53", delay)
			h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=dns", "--dns-timeout=200ms",
				"--cache-active-timeout="+c.period)
			rc, err := netlab.AskDNS(p.A, p.IPA+":41500", p.IPB+":53", netlab.DNSQuery(0x4242, "late.test"), 2*time.Second)
			if err != nil || rc != 0 {
				t.Fatalf("rcode %d (%v), want the late answer", rc, err)
			}
			time.Sleep(300 * time.Millisecond) // a few evictions with the short period
			fams := promtest.GatherFrom(t, h.A.Metrics.Registry())
			flows := h.Stop()
			promtest.Expect(t, fams, c.swept, evictionsMetric, "reason=timeout")
			var timeouts, withLatency int
			for _, f := range flows {
				if f.SrcAddr == p.IPA && f.SrcPort == 41500 && f.DstPort == 53 {
					if f.DNSTimeout {
						timeouts++
					}
					if f.DNSLatencyNs > 0 {
						withLatency++
						if f.DNSLatencyNs < uint64(delay) || !f.DNSTimeout {
							t.Errorf("latency %v timeout %v, want over %v and a timeout", time.Duration(f.DNSLatencyNs), f.DNSTimeout, delay)
						}
					}
				}
			}
			if timeouts != 1 || withLatency != btoi(c.latency) {
				t.Errorf("%d timeout records, %d with a latency; want 1 and %d", timeouts, withLatency, btoi(c.latency))
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
