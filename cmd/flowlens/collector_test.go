package main

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
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
var (
	buildOnce    sync.Once
	collectorBin string
	buildErr     error
)

func buildCollector(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if collectorBin = os.Getenv("FLOWLENS_COLLECTOR_BIN"); collectorBin != "" {
			return
		}
		root, err := testkit.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "observe-collector-")
		if err != nil {
			buildErr = err
			return
		}
		collectorBin = filepath.Join(dir, "flowlens-collector")
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		cmd := exec.Command(goBin, "build", "-o", collectorBin, "./cmd/flowlens-collector")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			collectorBin = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/flowlens-collector: %v\n%s", buildErr, collectorBin)
	}
	return collectorBin
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
