// Package collectortest is what the collector's tests share, those of its
// wiring (internal/collector) and those of its command: a buffer to read
// its output from while it writes, sample flows, an agent sending them
// over gRPC, and a flowlens observe asking for its history.
package collectortest

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
)

// SyncBuffer is an io.Writer tests can read while the collector writes
// (internal/testkit's, with Lines).
type SyncBuffer struct{ testkit.SyncBuffer }

// Lines are the lines written so far (none: nil).
func (s *SyncBuffer) Lines() []string {
	out := strings.Split(strings.TrimRight(s.String(), "\n"), "\n")
	if len(out) == 1 && out[0] == "" {
		return nil
	}
	return out
}

// Records are three flows: UDP to a DNS server, TCP to 192.168.7.7:443
// with RTT and a drop, ICMPv6; the third ends first.
func Records() []flow.Record {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	return []flow.Record{
		{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.53"), SrcPort: 40000, DstPort: 53, Proto: 17,
			Bytes: 120, Packets: 2, StartTime: t0, EndTime: t0.Add(time.Millisecond), Sampling: 1, EthType: 0x800,
			Interfaces: []flow.Interface{{Name: "veth1", Ifindex: 9, Netns: "pod-a", Direction: flow.DirIngress}, {Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress}},
			// Out of the node in a VXLAN tunnel: the tunnel fields go through
			// the collector too.
			Tunnel: flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: netip.MustParseAddr("192.0.2.1"), TunnelDstAddr: netip.MustParseAddr("192.0.2.2"), TunnelVNI: 1}},
		{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("192.168.7.7"), SrcPort: 40001, DstPort: 443, Proto: 6,
			Bytes: 9000, Packets: 10, StartTime: t0, EndTime: t0.Add(time.Second), Sampling: 1,
			RTTFields:   flow.RTTFields{RTT: 1500 * time.Microsecond},
			DropsFields: flow.DropsFields{DropPackets: 1, DropBytes: 60, DropCause: "NETFILTER_DROP"},
			Interfaces:  []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirBoth}}},
		{SrcAddr: netip.MustParseAddr("fd00::1"), DstAddr: netip.MustParseAddr("fd00::2"), Proto: 58, IcmpType: 128,
			Bytes: 104, Packets: 1, StartTime: t0, EndTime: t0, Sampling: 1},
	}
}

// Send exports recs to the collector at addr as the agent of node-7 at
// 192.0.2.1 would, and returns once the collector handled them all.
func Send(t testing.TB, addr string, recs []flow.Record) {
	t.Helper()
	Export(t, grpcexp.Config{Target: addr, NodeName: "node-7", AgentIP: netip.MustParseAddr("192.0.2.1")}, recs)
}

// Export exports recs with an agent's gRPC exporter configured by cfg,
// and returns once the collector handled them all.
func Export(t testing.TB, cfg grpcexp.Config, recs []flow.Record) {
	t.Helper()
	e, err := grpcexp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Export(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil { // waits for the collector's summary: all handled
		t.Fatal(err)
	}
}

// GetFlows asks the collector at addr for its whole history.
func GetFlows(t testing.TB, addr string) ([]*flowv1.HistoryFlow, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := flowv1.NewFlowHistoryClient(conn).GetFlows(context.Background(), &flowv1.GetFlowsRequest{})
	if err != nil {
		return nil, err
	}
	var out []*flowv1.HistoryFlow
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r.GetFlow())
	}
}
