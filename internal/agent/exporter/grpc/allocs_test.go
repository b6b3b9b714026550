package grpc_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	flowgrpc "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
)

// sinkEnv makes the test binary a sink server in a child process
// (TestMain), so that a test counts the exporter's allocations alone.
const sinkEnv = "FLOWLENS_GRPC_SINK"

func TestMain(m *testing.M) {
	if os.Getenv(sinkEnv) != "" {
		serveSink()
		return
	}
	os.Exit(m.Run())
}

// TestNoAllocationsPerFlow: in steady state the exporter allocates nothing
// per flow; what gRPC allocates per message (frames, stream bookkeeping)
// does not grow with the flows in it (exportertest.MarginalAllocs). The
// server is a child process (sinkServer's, which counts messages without
// decoding them), so the figure is the agent's side alone.
func TestNoAllocationsPerFlow(t *testing.T) {
	addr, received := childSink(t)
	exp, err := flowgrpc.New(flowgrpc.Config{Target: addr, NodeName: "node-1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	exportertest.NoAllocsPerFlow(t, exp, func() {
		// Polled at 1 ms: each poll is an HTTP request, whose allocations
		// count in the figure.
		awaitMessages(t, exp, received, time.Millisecond)
	})
}

// childSink starts serveSink in a child process and returns its gRPC
// address and a function reading how many messages it received.
func childSink(t *testing.T) (addr string, received func() uint64) {
	addr, count, _ := strings.Cut(exportertest.Child(t, sinkEnv+"=1"), " ")
	return addr, func() uint64 {
		resp, err := http.Get("http://" + count)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		n, err := strconv.ParseUint(string(b), 10, 64)
		if err != nil {
			t.Fatalf("sink count %q: %v", b, err)
		}
		return n
	}
}

// serveSink serves sinkServer's gRPC server and, on a second listener,
// the count of messages it received over HTTP; it prints both addresses
// and runs until stdin closes.
func serveSink() {
	var received atomic.Uint64
	g, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	h, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go newSink(&received).Serve(g)
	go http.Serve(h, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, received.Load())
	}))
	fmt.Println(g.Addr(), h.Addr())
	io.Copy(io.Discard, os.Stdin)
}
