package agent_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The same loopback tuple in two watched namespaces is two flows, each
// with its own packets and its own namespace's lo (the key's zone,
// bpf/zone.h), while a packet crossing the veth pair between them is
// still one flow counted once; and the RTT of a loopback TCP connection
// reaches its flow (the socket-side hook computes the same zone).
func TestLoopbackTuplesInTwoNamespaces(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.A, "127.0.0.1:8080")
	agenttest.MustListen(t, p.B, "127.0.0.1:8080")
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	// Both namespaces' lo and the veth pair: 4 interfaces.
	h := agenttest.Start(t, 4, agent.Options{}, p.NetnsArg(), "--exclude-interfaces=", "--features=rtt",
		"--cache-active-timeout=1h")
	const nA, nB, nVeth = 5, 7, 3
	payload := []byte("zon")
	for _, s := range []struct {
		ns *netlab.Netns
		n  int
	}{{p.A, nA}, {p.B, nB}} {
		if err := netlab.UDPSend(s.ns, "127.0.0.1:40000", "127.0.0.1:8080", payload, s.n); err != nil {
			t.Fatal(err)
		}
	}
	if err := netlab.UDPSend(p.A, p.IPA+":41000", p.IPB+":9000", payload, nVeth); err != nil {
		t.Fatal(err)
	}
	// A TCP connection on A's loopback: its RTT must land on a flow.
	got := agenttest.TCPSink(t, p.A, "tcp", "127.0.0.1:7000")
	cport := agenttest.TCPSend(t, p.A, "tcp", "127.0.0.1:7000", 200000)
	agenttest.AwaitReceived(t, got, 200000)
	flows := h.Stop()

	perNetns := map[string]uint64{}
	_, _, recs := agenttest.Sum(flows, agenttest.Match{Src: "127.0.0.1", Dst: "127.0.0.1", Sport: 40000, Dport: 8080, Proto: 17})
	for _, f := range recs {
		if len(f.Interfaces) != 1 || f.Interfaces[0].Name != "lo" || f.Bytes != f.Packets*(14+20+8+uint64(len(payload))) {
			t.Errorf("loopback record %+v: want one interface, lo, and %d bytes a packet", f, 14+20+8+len(payload))
			continue
		}
		perNetns[f.Interfaces[0].Netns] += f.Packets
	}
	t.Logf("loopback tuple: %d records, packets by namespace %v", len(recs), perNetns)
	if len(perNetns) != 2 || perNetns[p.A.Name] != nA || perNetns[p.B.Name] != nB {
		t.Errorf("loopback tuple packets by namespace %v, want %s: %d, %s: %d", perNetns, p.A.Name, nA, p.B.Name, nB)
	}
	pk, _, vrecs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 41000, Dport: 9000, Proto: 17})
	if pk != nVeth || len(vrecs) != 1 || len(vrecs[0].Interfaces) != 2 {
		t.Errorf("veth flow: %d packets in %d records %+v, want %d in one record listing both veths", pk, len(vrecs), vrecs, nVeth)
	}
	// The RTT is recorded on the flow of what the client receives.
	_, _, rtts := agenttest.Sum(flows, agenttest.Match{Src: "127.0.0.1", Dst: "127.0.0.1", Sport: 7000, Dport: uint16(cport), Proto: 6})
	var rttOnFlow bool
	for _, f := range rtts {
		if *f.Partial {
			t.Errorf("partial record of the loopback connection: the RTT hook's key is not the TC programs' (zone): %+v", f)
		}
		if f.RTTNs > 0 && f.Packets > 0 {
			rttOnFlow = true
		}
	}
	if !rttOnFlow {
		t.Errorf("no RTT on the loopback connection's flow 127.0.0.1:7000 -> :%d: %+v", cport, rtts)
	}
}

// The drops, RTT and retransmit hooks see the whole host: a socket whose
// packets cross no watched interface (here a TCP connection on a
// namespace's loopback, lo excluded as by default) makes no record, its
// events are counted as unwatched; a watched connection keeps its RTT.
// With --enrich-unwatched the loopback connection's RTT comes back, as
// partial records.
func TestUnwatchedSocketsMakeNoRecord(t *testing.T) {
	for _, unwatched := range []bool{false, true} {
		name := "default"
		if unwatched {
			name = "enrich-unwatched"
		}
		t.Run(name, func(t *testing.T) {
			p := agenttest.NewPair(t)
			args := []string{p.NetnsArg(), "--features=rtt,retransmits,drops", "--cache-active-timeout=1h"}
			if unwatched {
				args = append(args, "--enrich-unwatched")
			}
			h := agenttest.Start(t, 2, agent.Options{}, args...)
			got := agenttest.TCPSink(t, p.A, "tcp", "127.0.0.1:7000")
			agenttest.TCPSend(t, p.A, "tcp", "127.0.0.1:7000", 200000)
			agenttest.AwaitReceived(t, got, 200000)
			p.Transfer(t, 7001, 200000)
			skipped, err := h.A.DP.ReadEnrichmentUnwatched()
			if err != nil {
				t.Fatal(err)
			}
			flows := h.Stop()

			var lo, loRTT int
			for _, f := range flows {
				if f.SrcAddr == "127.0.0.1" || f.DstAddr == "127.0.0.1" {
					lo++
					if f.RTTNs > 0 && *f.Partial && f.Packets == 0 {
						loRTT++
					}
				}
			}
			_, _, _, rttMax, _, _ := agenttest.EnrichSum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: 7001, Proto: 6})
			t.Logf("%d loopback records (%d with an RTT), %d unwatched events skipped; watched connection's max RTT %d ns", lo, loRTT, skipped, rttMax)
			if rttMax == 0 {
				t.Errorf("the watched connection's flow (%s:7001 -> %s) has no RTT", p.IPB, p.IPA)
			}
			if !unwatched {
				if lo != 0 {
					t.Errorf("%d records of the unwatched loopback connection, want 0", lo)
				}
				if skipped == 0 {
					t.Error("no unwatched event counted (flowlens_agent_enrichment_unwatched_total), yet the loopback connection had RTT samples")
				}
			} else if loRTT == 0 || skipped != 0 {
				t.Errorf("--enrich-unwatched: %d partial loopback records with an RTT (want some), %d events skipped (want 0)", loRTT, skipped)
			}
		})
	}
}
