//go:build chaos

package chaos

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// brokerOutage is how long the broker stays down (issue #28: 30 s).
const brokerOutage = 30 * time.Second

// TestKafkaBrokerOutage: two real agents export to a real broker, one
// real collector consumes the topic; UDP flows of exactly kafkaPer packets
// each (one new source port every 250 ms) run before, during and after a
// 30 s broker outage (the broker stopped, then started again on its data
// and ports). The agents watch the two ends of one veth: "node-1s" veth-a
// (egress) with --cache-active-timeout 1s, "node-5s" veth-b (ingress) with
// the default 5 s; both with the default --export-buffer (8 batches).
//
// For each agent, against its own veth's kernel counter:
//   - the agent counted every packet the kernel did (its stdout), every
//     flow exactly kafkaPer;
//   - delivered (the collector's output) + counted as lost (the agent's
//     export_dropped_flows_total + export_failed_flows_total, per flow)
//     == what the kernel counted, exactly, record by record: the records
//     missing from the collector's output are exactly as many as the
//     agent counted lost;
//   - nothing consumed twice (no record printed twice);
//   - losses where the queue overflows: node-1s loses (its queue holds
//     about 9 s), node-5s does not (about 45 s) when the outage, stop to
//     ready, stays under 40 s;
//   - recovery without restarts: every flow sent after the broker came
//     back is delivered, the same three processes running throughout, the
//     collector ready all along (/readyz polled every second).
func TestKafkaBrokerOutage(t *testing.T) {
	testkit.NeedRoot(t, "network namespaces, BPF")
	b := kafkatest.Start(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log:\n%s", b.Log())
		}
	})
	const topic = "chaos-flows"
	b.CreateTopic(topic, 2)

	coll := startProc(t, "collector", bin["flowlens-collector"], "--listen=127.0.0.1:0", "--output=json", "--k8s-enrich=false",
		"--kafka-brokers="+b.Addr, "--kafka-topic="+topic, "--kafka-group=chaos", "--kafka-start-offset=earliest")
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	// --features none: the drop, RTT and retransmit hooks see the whole
	// host, and other tests' floods there would fill the agents' output
	// (and their export queues) with records of their own.
	kafka := []string{"--export=stdout,kafka", "--kafka-brokers=" + b.Addr, "--kafka-topic=" + topic, "--features=none"}
	agents := []*outageAgent{
		{node: "node-1s", ns: p.A, ifname: p.IfA, period: time.Second},
		{node: "node-5s", ns: p.B, ifname: p.IfB, period: 5 * time.Second},
	}
	for _, a := range agents {
		args := append([]string{"--netns=" + a.ns.Name, "--interfaces=" + a.ifname, "--node-name=" + a.node,
			"--cache-active-timeout=" + a.period.String()}, kafka...)
		a.proc = startProc(t, "agent-"+a.node, bin["flowlens-agent"], args...)
	}
	for _, a := range agents {
		a.proc.waitReady(t, 30*time.Second)
		waitFor(t, 30*time.Second, a.node+" attached", func() (bool, string) {
			a.proc.alive(t)
			return a.proc.logHas("watching 1 interface"), "no 'watching 1 interface' line"
		})
	}
	coll.waitReady(t, 30*time.Second)
	waitFor(t, 60*time.Second, "collector holds the topic's partitions", func() (bool, string) {
		coll.alive(t)
		n := value(coll.scrape(t), "flowlens_collector_kafka_assigned_partitions")
		return n == 2, fmt.Sprintf("%d partitions assigned", n)
	})
	agents[0].kernel0 = kernelPackets(t, agents[0])
	agents[1].kernel0 = kernelPackets(t, agents[1])

	// One new flow (source port) every 250 ms, kafkaPer packets each.
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			port := kafkaPort0 + int(sent.Load())
			if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, port), p.IPB+":9000", []byte("chaos-kafka"), kafkaPer); err != nil {
				t.Errorf("send: %v", err)
				return
			}
			sent.Add(1)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	time.Sleep(6 * time.Second) // traffic before the outage
	beforeStop := int(sent.Load())
	down := time.Now()
	b.Stop()
	// The outage, the collector's /readyz polled every second meanwhile.
	var polls int
	var unready []string
	for time.Since(down) < brokerOutage {
		polls++
		if code, body := get("http://" + coll.metrics + "/readyz"); code != 200 {
			unready = append(unready, fmt.Sprintf("%v: %d %s", time.Since(down).Round(time.Second), code, body))
		}
		time.Sleep(time.Second)
	}
	b.Restart()
	if len(unready) > 0 {
		t.Errorf("collector unready in %d of %d polls during the outage: %v", len(unready), polls, unready)
	}
	outage := time.Since(down)
	back, afterBack := time.Now(), int(sent.Load())
	// Traffic after it, for 6 s; meanwhile, how long until node-1s has
	// records acknowledged again (its 1 s period shows it first).
	acked0 := value(agents[0].proc.scrape(t), "flowlens_agent_export_acked_flows_total", "exporter=kafka")
	var exporting time.Duration
	for time.Since(back) < 6*time.Second {
		if exporting == 0 && value(agents[0].proc.scrape(t), "flowlens_agent_export_acked_flows_total", "exporter=kafka") > acked0 {
			exporting = time.Since(back)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	total := int(sent.Load())
	t.Logf("flows sent: %d before the outage, %d during it (%v, stop to ready), %d after", beforeStop, afterBack-beforeStop,
		outage.Round(100*time.Millisecond), total-afterBack)

	// Both sides recover by themselves: every flow sent once the broker
	// was back reaches the collector.
	var recovered time.Duration
	waitFor(t, 60*time.Second, "flows sent after the outage delivered", func() (bool, string) {
		for _, pr := range []*proc{coll, agents[0].proc, agents[1].proc} {
			pr.alive(t)
		}
		got := map[string]uint64{}
		for _, f := range coll.flows(t) {
			if int(f.SrcPort) >= kafkaPort0+afterBack {
				got[f.NodeName] += f.Packets
			}
		}
		want := uint64(kafkaPer * (total - afterBack))
		if got["node-1s"] == want && got["node-5s"] == want {
			recovered = time.Since(back)
			return true, ""
		}
		return false, fmt.Sprintf("packets of the last flows delivered: %v, want %d each", got, want)
	})
	t.Logf("node-1s had records acknowledged again %v after the broker was ready; every flow sent after the outage delivered %v after it",
		exporting.Round(100*time.Millisecond), recovered.Round(100*time.Millisecond))

	lost := map[string]uint64{}
	for _, a := range agents {
		lost[a.node] = a.check(t, coll, total)
	}
	// The queue holds --export-buffer batches (8) beside the one whose
	// Export waits for the broker: at a 1 s period it overflows within
	// about 10 s (the losses are counted, above); at the default 5 s it
	// holds about 45 s, so an outage under 40 s loses nothing.
	if lost["node-1s"] == 0 {
		t.Errorf("node-1s lost nothing in a %v outage with a 1 s period: the queue should have overflowed", outage)
	}
	if outage < 40*time.Second && lost["node-5s"] != 0 {
		t.Errorf("node-5s lost %d records in a %v outage with the default period and buffer", lost["node-5s"], outage)
	}
	// The collector handled each delivered record once, and counted them.
	var printed uint64
	for _, f := range coll.flows(t) {
		if f.NodeName == "node-1s" || f.NodeName == "node-5s" {
			printed++
		}
	}
	cf := coll.scrape(t)
	if n := value(cf, "flowlens_collector_kafka_flows_total"); n != printed {
		t.Errorf("collector kafka_flows_total %d, printed %d", n, printed)
	}
	if n := value(cf, "flowlens_collector_kafka_commit_errors_total"); n != 0 {
		t.Errorf("collector commit_errors_total %d", n)
	}
	t.Logf("collector: %d records, %d offset commits, %d 'fetch failed' log lines", printed,
		value(cf, "flowlens_collector_kafka_commits_total"), coll.logCount("fetch failed"))
}

const (
	kafkaPort0 = 20000 // the first flow's source port
	kafkaPer   = 4     // packets per flow
)

// outageAgent is one of the agents of TestKafkaBrokerOutage: the end of
// the veth it watches, its period, its process and its kernel counter
// when the traffic started.
type outageAgent struct {
	node    string
	ns      *netlab.Netns
	ifname  string
	period  time.Duration
	proc    *proc
	kernel0 uint64
}

// kernelPackets is the kernel's count of the packets a watches: veth-a's
// transmitted (egress), veth-b's received (ingress).
func kernelPackets(t *testing.T, a *outageAgent) uint64 {
	t.Helper()
	st, err := netlab.ReadLinkStats(a.ns, a.ifname)
	if err != nil {
		t.Fatal(err)
	}
	if a.ifname == "veth-a" {
		return st.TxPackets
	}
	return st.RxPackets
}

// check waits until a evicted every packet the kernel counted and its
// Kafka exporter is done with every record (delivered, or counted lost),
// then checks the sums record by record. It returns the records lost.
func (a *outageAgent) check(t *testing.T, coll *proc, flows int) uint64 {
	t.Helper()
	kernel := kernelPackets(t, a) - a.kernel0
	if want := uint64(kafkaPer * flows); kernel != want {
		t.Errorf("%s: the kernel counted %d packets, %d sent", a.node, kernel, want)
	}
	var local, delivered map[string]outFlow
	var lost uint64
	waitFor(t, 60*time.Second, a.node+": every record evicted and delivered or counted", func() (bool, string) {
		local, delivered = map[string]outFlow{}, map[string]outFlow{}
		var evicted uint64
		for _, f := range a.proc.flows(t) {
			local[f.key(a.node)] = f
			evicted += f.Packets
		}
		for _, f := range coll.flows(t) {
			if f.NodeName == a.node {
				delivered[f.key(a.node)] = f
			}
		}
		fams := a.proc.scrape(t)
		lost = value(fams, "flowlens_agent_export_dropped_flows_total", "exporter=kafka") +
			value(fams, "flowlens_agent_export_failed_flows_total", "exporter=kafka")
		queued := value(fams, "flowlens_agent_export_queue_batches", "exporter=kafka")
		return evicted == kernel && uint64(len(delivered))+lost == uint64(len(local)) && queued == 0,
			fmt.Sprintf("evicted %d packets of %d, %d records: %d delivered + %d lost, %d batches queued",
				evicted, kernel, len(local), len(delivered), lost, queued)
	})

	perFlow := map[uint16]uint64{}
	for _, f := range local {
		perFlow[f.SrcPort] += f.Packets
	}
	for i := range flows {
		if n := perFlow[uint16(kafkaPort0+i)]; n != kafkaPer {
			t.Errorf("%s: flow of port %d counted %d packets, %d sent", a.node, kafkaPort0+i, n, kafkaPer)
		}
	}
	// Nothing consumed twice.
	seen := map[string]int{}
	for _, f := range coll.flows(t) {
		if f.NodeName == a.node {
			seen[f.key(a.node)]++
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%s: record printed %d times by the collector: %s", a.node, n, k)
		}
	}
	var deliveredPackets, missingPackets, missing uint64
	for k, f := range delivered {
		if _, ok := local[k]; !ok {
			t.Errorf("%s: the collector printed a record the agent did not evict: %s", a.node, k)
		}
		deliveredPackets += f.Packets
	}
	for k, f := range local {
		if _, ok := delivered[k]; !ok {
			missing++
			missingPackets += f.Packets
		}
	}
	if missing != lost {
		t.Errorf("%s: %d records not delivered, %d counted lost", a.node, missing, lost)
	}
	if deliveredPackets+missingPackets != kernel {
		t.Errorf("%s: delivered %d + lost %d packets = %d, the kernel counted %d", a.node, deliveredPackets, missingPackets,
			deliveredPackets+missingPackets, kernel)
	}
	for _, f := range local {
		if f.SrcAddr != "10.99.0.1" || f.DstPort != 9000 || f.Packets == 0 {
			t.Errorf("%s: a record of traffic the test did not send: %s", a.node, f.key(a.node))
		}
	}
	fams := a.proc.scrape(t)
	if acked := value(fams, "flowlens_agent_export_acked_flows_total", "exporter=kafka"); acked != uint64(len(delivered)) {
		t.Errorf("%s: acked_flows_total %d, %d records delivered", a.node, acked, len(delivered))
	}
	t.Logf("%s (period %v, --export-buffer 8): kernel %d packets in %d flows; %d records evicted: %d delivered (%d packets) + %d lost (%d packets: dropped %d, failed %d)",
		a.node, a.period, kernel, flows, len(local), len(delivered), deliveredPackets, missing, missingPackets,
		value(fams, "flowlens_agent_export_dropped_flows_total", "exporter=kafka"),
		value(fams, "flowlens_agent_export_failed_flows_total", "exporter=kafka"))
	return missing
}
