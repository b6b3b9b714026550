package main

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// The tests run the real flowlens-collector binary, built once from this
// tree (FLOWLENS_COLLECTOR_BIN names a prebuilt one), and send it flows
// with the agent's real gRPC exporter.
func buildCollector(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("FLOWLENS_COLLECTOR_BIN"); bin != "" {
		return bin
	}
	return testkit.Build(t, "./cmd/flowlens-collector")
}

// startCollector runs a collector on a free loopback port with args and
// returns its gRPC address once it accepts connections; it is stopped
// (SIGINT) when the test ends.
func startCollector(t *testing.T, args ...string) string {
	t.Helper()
	bin := buildCollector(t)
	addr := testkit.FreeAddr(t)
	p := testkit.Start(t, "collector "+addr, exec.Command(bin, append([]string{"--listen=" + addr, "--metrics-address=", "--output=none"}, args...)...))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		select {
		case <-p.Done():
			t.Fatalf("collector exited: %v", p.Err())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not listening after 20s")
		}
	}
}

// send exports recs to the collector at addr as the agent of node does,
// and returns once the collector has handled them.
func send(t *testing.T, addr, node string, recs []flow.Record) {
	t.Helper()
	collectortest.Export(t, grpcexp.Config{Target: addr, NodeName: node, AgentIP: netip.MustParseAddr("192.0.2.1")}, recs)
}

// sendTLS is send as node-a over mTLS.
func sendTLS(t *testing.T, addr string, pki *receivertest.PKI, recs []flow.Record) {
	t.Helper()
	collectortest.Export(t, grpcexp.Config{Target: addr, NodeName: "node-a", AgentIP: netip.MustParseAddr("192.0.2.1"),
		TLSCA: pki.CA, TLSCert: pki.ClientCert, TLSKey: pki.ClientKey}, recs)
}
