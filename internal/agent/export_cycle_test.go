package agent_test

import (
	"context"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// Many UDP flows cycled, as bench-live's saturating UDP workload does
// (docs/benchmarks.md §28, "The exception"), exported over gRPC
// (ExportAcked) in batches of 1,000 to a real collector (pkg/receiver)
// that only sums what it applies, like bench-live's sink. Every packet the
// veth sent is delivered exactly once, or its flow is counted lost by the
// agent: the collector's records plus the flows the agent's "exporter
// stopped" line counts lost are every flow handed to the exporter, which
// are every flow evicted ("evictor stopped": nothing lost before). Cases:
//   - the collector's acknowledgements slowed, the agent stopped as soon as
//     the traffic ends (the final eviction's batches in flight): nothing
//     lost, every flow's packets exact;
//   - the collector stopped hard twice mid-run, in the middle of an
//     eviction's batches (streams cut, a message applied and not
//     acknowledged, others sent and not applied) and started again on its
//     port with its acknowledgement journal: the agent sends what is
//     pending again, the collector drops what it had applied; every
//     flow's packets exact;
//   - acknowledgements slower than the agent's wait budgets (half the
//     period, 2 s at shutdown): the batches of an eviction that do not fit
//     in time are dropped, oldest first, each counted (queue full), never
//     silently: bench-live's loss of whole batches, in the counts.
func TestGRPCCycledFlowsAccounted(t *testing.T) {
	netlab.Require(t)
	const (
		flows = 20000 // 20 batches of 1,000 per eviction
		rate  = 40000 // frames/s
		dur   = 3 * time.Second
	)
	for _, tc := range []struct {
		name     string
		ackDelay time.Duration // the collector's handler, per message
		restarts int           // hard stops of the collector during the traffic
		// The export queue and unacknowledged batches (--export-buffer):
		// room for a whole eviction while the collector is away.
		buffer string
		lossy  bool // drops expected (and counted)
	}{
		{name: "slow acks, stopped in flight", ackDelay: 20 * time.Millisecond, buffer: "8"},
		{name: "collector restarted mid-run", ackDelay: 10 * time.Millisecond, restarts: 2, buffer: "64"},
		{name: "acks slower than the shutdown budget", ackDelay: 400 * time.Millisecond, buffer: "8", lossy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := agenttest.NewPair(t)
			sink := &cycleSink{delay: tc.ackDelay, packets: map[uint32]uint64{}}
			opts := receiver.Options{AckStateFile: filepath.Join(t.TempDir(), "acks")}
			col := sink.start(t, "127.0.0.1:0", opts)
			addr := col.addr
			h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--export=grpc", "--target="+addr,
				"--cache-active-timeout=1s", "--export-buffer="+tc.buffer)

			srcMAC := p.MACA(t)
			// A destination MAC that is not the peer's: veth-b's hooks see
			// each frame, then its stack drops it, answering nothing.
			f, err := netlab.NewFlooder(p.A, p.IfA, srcMAC, net.HardwareAddr{0x02, 0, 0, 0, 0xf1, 0x00},
				net.ParseIP(p.IPA), net.ParseIP(p.IPB), false)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.Cycle = flows // frame k: source port k mod flows, destination port 1

			_, _, tx0, _ := netlab.LinkStats(p.A, p.IfA)
			sent := make(chan uint64, 1)
			go func() {
				n, err := f.Flood(dur, rate)
				if err != nil {
					t.Error(err)
				}
				sent <- n
			}()
			for i := range tc.restarts {
				// Mid-burst: three messages of an eviction's applied, the
				// fourth's handler running, the rest sent and waiting.
				mark, _, _ := sink.totals()
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
					if r, _, _ := sink.totals(); r >= mark+3000 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the collector got no batch in 20 s (%d records)", mark)
					}
				}
				col.kill(t)
				time.Sleep(300 * time.Millisecond)
				col = sink.start(t, addr, opts)
				t.Logf("collector stopped hard and started again (%d)", i+1)
			}
			n := <-sent
			_, _, tx1, _ := netlab.LinkStats(p.A, p.IfA)
			if tx1-tx0 != n {
				t.Fatalf("the flooder sent %d frames, the veth's kernel counters %d", n, tx1-tx0)
			}
			h.Stop() // at once: the final eviction's batches are still in flight
			es := h.A.Evictor.Stats
			evicted := es.Flows.Load() + es.OverflowFlows.Load() + es.PartialFlows.Load() + es.OuterFlows.Load()
			col.kill(t) // every message it applied is in sink

			// Nothing lost before the export: the agent's last word on it.
			ev := stoppedLine(t, h.Log(), "evictor stopped", "")
			if ev["flows"]+ev["overflow_flows"]+ev["partial_flows"]+ev["outer_flows"] != evicted ||
				ev["overflow_records"] != 0 || ev["overflow_lost"] != 0 || ev["lost_packets_overflow_aggregation_full"] != 0 || ev["read_failures"] != 0 {
				t.Errorf("evictor stopped: %v, want %d flows and nothing lost", ev, evicted)
			}
			st := stoppedLine(t, h.Log(), "exporter stopped", "exporter=grpc")
			handed := st["exported_flows"] + st["failed_export_flows"] + st["dropped_flows"] + st["shutdown_lost_flows"]
			lost := st["dropped_flows"] + st["shutdown_lost_flows"] + st["failed_flows"] + st["rejected_flows"]
			records, packets, other := sink.totals()
			t.Logf("%d frames through %d flows; agent: %d flows evicted, exporter %v; collector: %d records, %d packets, %d duplicate messages dropped",
				n, flows, evicted, st, records, packets, sink.duplicates())
			if other != 0 {
				t.Errorf("%d records of flows not the test's", other)
			}
			if handed != evicted {
				t.Errorf("the exporter was handed %d flows, %d evicted", handed, evicted)
			}
			if records != st["acked_flows"] {
				t.Errorf("the collector applied %d records, the agent counted %d acknowledged", records, st["acked_flows"])
			}
			if records+lost != evicted {
				t.Errorf("delivered %d + counted lost %d = %d flows, %d evicted: %d lost silently",
					records, lost, records+lost, evicted, int64(evicted)-int64(records+lost))
			}
			if tc.lossy {
				if st["dropped_flows"] == 0 || packets >= n {
					t.Errorf("no drop at a shutdown budget (%d flows dropped, %d of %d packets delivered): the case tests nothing", st["dropped_flows"], packets, n)
				}
				if !strings.Contains(h.Log(), "export queue full: dropping the oldest batches") {
					t.Error("the drop was not logged")
				}
				return
			}
			if lost != 0 {
				t.Errorf("%d flows counted lost, want none", lost)
			}
			// Every flow's packets, exactly: frame k is flow k mod flows.
			bad := 0
			for k := range uint64(flows) {
				want := n / flows
				if k < n%flows {
					want++
				}
				if got := sink.flow(uint32(k)); got != want && bad < 10 {
					bad++
					t.Errorf("flow %d: %d packets delivered, %d sent", k, got, want)
				}
			}
			if packets != n {
				t.Errorf("%d packets delivered, %d sent", packets, n)
			}
		})
	}
}

// cycleSink sums what its collectors apply, across their restarts: the
// packets of each flow of the test's traffic (UDP to destination port 1,
// by source port), records and the records of any other flow.
type cycleSink struct {
	delay time.Duration

	mu      sync.Mutex
	packets map[uint32]uint64
	records uint64
	other   uint64
	dups    uint64 // duplicate messages the stopped collectors dropped
}

func (s *cycleSink) handle(_ context.Context, b *receiver.Batch) error {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range b.Flows {
		s.records++
		if f.GetProto() != 17 || f.GetDstPort() != 1 {
			s.other++
			continue
		}
		s.packets[f.GetSrcPort()] += f.GetPackets()
	}
	return nil
}

func (s *cycleSink) totals() (records, packets, other uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.packets {
		packets += p
	}
	return s.records, packets, s.other
}

func (s *cycleSink) flow(port uint32) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.packets[port]
}

func (s *cycleSink) duplicates() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dups
}

// cycleCollector is one collector process's worth: a receiver.Server on
// addr whose handler is the sink's.
type cycleCollector struct {
	addr   string
	srv    *receiver.Server
	served chan error
	sink   *cycleSink
	killed bool
}

// start runs a collector on addr (its port again, after a kill: retried
// while the old listener's port is still held).
func (s *cycleSink) start(t *testing.T, addr string, opts receiver.Options) *cycleCollector {
	t.Helper()
	srv, err := receiver.New(s.handle, opts)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &cycleCollector{addr: l.Addr().String(), srv: srv, served: make(chan error, 1), sink: s}
	go func() { c.served <- srv.Serve(l) }()
	t.Cleanup(func() { c.kill(t) })
	return c
}

// kill stops the collector at once (streams cut mid-message, as a killed
// process's would be); it returns once every message it applied is in the
// sink and its journal. Idempotent.
func (c *cycleCollector) kill(t *testing.T) {
	if c.killed {
		return
	}
	c.killed = true
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.srv.Shutdown(ctx) // cancelled: gRPC's Stop, then the receive loops' end
	<-c.served
	c.sink.mu.Lock()
	c.sink.dups += c.srv.Stats.Duplicates.Load()
	c.sink.mu.Unlock()
}

// stoppedLine reads the counts of the agent's msg line (after the
// attribute first, when not empty): its "evictor stopped" and "exporter
// stopped" lines, its last word on its flows.
func stoppedLine(t *testing.T, log, msg, first string) map[string]uint64 {
	t.Helper()
	prefix := `msg="` + msg + `" `
	if first != "" {
		prefix += first + " "
	}
	m := regexp.MustCompile(regexp.QuoteMeta(prefix) + `(.*)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no %s line", prefix)
	}
	counts := map[string]uint64{}
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", kv, err)
		}
		counts[k] = n
	}
	for _, k := range map[string][]string{"evictor stopped": {"flows", "overflow_lost", "overflow_records"},
		"exporter stopped": {"exported_flows", "acked_flows", "rejected_flows"}}[msg] {
		if _, ok := counts[k]; !ok {
			t.Fatalf("no %s in %q", k, m[0])
		}
	}
	return counts
}
