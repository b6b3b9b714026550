package ipfix

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/netflow"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
)

// neverReads is a TCP collector that accepts connections and never reads
// them, with a small receive buffer: the exporter's writes fill the
// socket's buffers and then block. It returns its address and the number
// of connections accepted so far.
func neverReads(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	addr, accepted, stop := neverReadsOn(t, "127.0.0.1:0")
	t.Cleanup(stop)
	return addr, accepted
}

// neverReadsOn is neverReads on addr; stop closes it and its connections.
func neverReadsOn(t *testing.T, addr string) (string, *atomic.Int64, func()) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns = append(conns, c) // held open, never read
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ln.Close()
			<-done
			for _, c := range conns {
				c.Close()
			}
		})
	}
	return ln.Addr().String(), &accepted, stop
}

// A TCP collector that accepts and never reads: each write that cannot
// complete fails at its deadline instead of blocking for the kernel's
// retransmission timeout; the message's flows are counted lost, the
// connection remade, and every flow handed over is either in a message
// written (records_total) or counted lost (failed_flows_total), exactly.
func TestTCPWriteDeadlineOnCollectorThatNeverReads(t *testing.T) {
	addr, accepted := neverReads(t)
	e, err := New(Config{Target: addr, Transport: "tcp", WriteTimeout: 100 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	given := 0
	var exportErr error
	for i := 0; i < 200 && e.Stats.FailedFlows.Load() == 0; i++ {
		b := records(5000) // about 0.5 MB of messages
		given += len(b)
		exportErr = e.Export(context.Background(), b)
	}
	st := &e.Stats
	if st.FailedFlows.Load() == 0 {
		t.Fatalf("%d flows exported to a collector that never reads, no write ever failed", given)
	}
	var ne net.Error
	if !errors.As(exportErr, &ne) || !ne.Timeout() {
		t.Errorf("Export: %v, want the write's timeout", exportErr)
	}
	if got := st.Records.Load() + st.FailedFlows.Load(); got != uint64(given) {
		t.Errorf("records written %d + flows lost %d = %d, want every flow handed over, %d",
			st.Records.Load(), st.FailedFlows.Load(), got, given)
	}
	for deadline := time.Now().Add(10 * time.Second); accepted.Load() < int64(st.Connects.Load()) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the collector's accept loop is behind the exporter's connect
	}
	if c := accepted.Load(); c < 2 || st.Connects.Load() != uint64(c) {
		t.Errorf("%d connections made, %d accepted: want a new one after the failed write", st.Connects.Load(), c)
	}
	t.Logf("%d flows handed over: %d written in %d messages, %d lost in %d failed writes, %d connections",
		given, st.Records.Load(), st.Messages.Load(), st.FailedFlows.Load(), st.SendErrors.Load(), st.Connects.Load())
}

// Close while a write is blocked on a collector that never reads (a write
// deadline far away): Close returns at once, the Export it aborted too, and
// the flows of that batch not written are counted lost.
func TestTCPCloseDoesNotWaitForStuckWrite(t *testing.T) {
	addr, _ := neverReads(t)
	e, err := New(Config{Target: addr, Transport: "tcp", WriteTimeout: time.Hour, BackoffBase: time.Hour, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200000 // about 20 MB: more than the socket buffers hold
	exported := make(chan error, 1)
	go func() { exported <- e.Export(context.Background(), records(n)) }()
	// Blocked: no message written for a while.
	for last, still := uint64(0), 0; still < 20; time.Sleep(10 * time.Millisecond) {
		if m := e.Stats.Messages.Load(); m == last && m > 0 {
			still++
		} else {
			last, still = m, 0
		}
	}
	select {
	case err := <-exported:
		t.Fatalf("Export returned (%v) while the collector never reads", err)
	default:
	}
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked behind a stuck write")
	}
	select {
	case err := <-exported:
		if !errors.Is(err, errClosed) {
			t.Errorf("Export after Close: %v, want %v", err, errClosed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Export still blocked after Close")
	}
	st := &e.Stats
	if got := st.Records.Load() + st.FailedFlows.Load(); got != n {
		t.Errorf("records written %d + flows lost %d = %d, want %d", st.Records.Load(), st.FailedFlows.Load(), got, n)
	}
	t.Logf("Close took %v; %d flows written, %d counted lost", time.Since(start), st.Records.Load(), st.FailedFlows.Load())
}

// The agent's shutdown with the IPFIX exporter stuck on a collector that
// never reads beside a stdout exporter: both flush at once (Fanout.Close),
// stdout writes every flow, the IPFIX exporter's part ends with its budget,
// and each of its flows is written, lost in a failed write, or counted lost
// at shutdown (still queued).
func TestStuckCollectorDoesNotBlockOtherExportersOrShutdown(t *testing.T) {
	addr, _ := neverReads(t)
	e, err := New(Config{Target: addr, Transport: "tcp", WriteTimeout: time.Hour, BackoffBase: time.Hour, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var out lines
	iq := exporter.NewQueue(e, 4, nil)
	sq := exporter.NewQueue(stdout.New(&out), 64, nil)
	fan := exporter.Fanout{iq, sq}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, q := range fan {
		go q.Run(ctx)
	}
	const batches, per = 40, 5000
	for i := 0; i < batches; i++ {
		fan.Push(flow.BatchOf(records(per)), time.Now().Add(20*time.Millisecond))
	}
	const budget = 500 * time.Millisecond
	start := time.Now()
	if err := fan.Close(budget); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > budget+time.Second {
		t.Errorf("shutdown took %v with a stuck collector, want its budget %v (and at most the close grace)", d, budget)
	}
	if got := out.n.Load(); got != batches*per {
		t.Errorf("stdout wrote %d flows, want %d", got, batches*per)
	}
	st, qs := &e.Stats, &iq.Stats
	accounted := st.Records.Load() + st.FailedFlows.Load() + qs.DroppedFlows.Load() + qs.ShutdownFlows.Load()
	if accounted != batches*per {
		t.Errorf("ipfix: written %d + failed %d + dropped %d + lost at shutdown %d = %d, want %d",
			st.Records.Load(), st.FailedFlows.Load(), qs.DroppedFlows.Load(), qs.ShutdownFlows.Load(), accounted, batches*per)
	}
	t.Logf("ipfix: written %d, failed %d, dropped %d, lost at shutdown %d", st.Records.Load(), st.FailedFlows.Load(),
		qs.DroppedFlows.Load(), qs.ShutdownFlows.Load())
}

// lines counts the JSON lines written to it.
type lines struct{ n atomic.Uint64 }

func (l *lines) Write(p []byte) (int, error) {
	l.n.Add(uint64(bytes.Count(p, []byte{'\n'})))
	return len(p), nil
}

// dnsServer is a real DNS server (dnsmasq) on 127.0.0.1 answering for
// collector.test from a hosts file: point moves the name to another
// address (the file rewritten, dnsmasq told with SIGHUP, and asked until
// it answers so). resolver asks it.
type dnsServer struct {
	t        *testing.T
	hosts    string
	cmd      *exec.Cmd
	resolver *net.Resolver
}

func startDNS(t *testing.T, addr string) *dnsServer {
	t.Helper()
	_, err := exec.LookPath("dnsmasq")
	testkit.Need(t, "dnsmasq (make deps-test installs it)", err)
	testkit.NeedRoot(t, "dnsmasq")
	d := &dnsServer{t: t, hosts: filepath.Join(t.TempDir(), "hosts")}
	if err := os.WriteFile(d.hosts, []byte(addr+" collector.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A free port for UDP and TCP both (dnsmasq listens on both); another
	// process can still take it before dnsmasq does: then it exits, and
	// another port is tried.
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		var stderr testkit.SyncBuffer
		d.cmd = exec.Command("dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--addn-hosts="+d.hosts,
			"--bind-interfaces", "--listen-address=127.0.0.1", "--port="+strconv.Itoa(port), "--pid-file=",
			"--user=root", "--group=root", "--cache-size=0", "--local=/test/")
		d.cmd.Stderr = &stderr
		if err := testkit.StartOwned(d.cmd); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { d.cmd.Wait(); close(exited) }()
		server := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		d.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "udp", server)
		}}
		if d.resolves(addr, exited) {
			t.Cleanup(func() { d.cmd.Process.Kill(); <-exited })
			return d
		}
		d.cmd.Process.Kill()
		<-exited
		if attempt == 4 {
			t.Fatalf("dnsmasq does not answer for collector.test: %s", stderr.String())
		}
	}
}

// resolves asks until collector.test resolves to addr (true), or dnsmasq
// exits or 10 s pass (false).
func (d *dnsServer) resolves(addr string, exited <-chan struct{}) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := d.resolver.LookupHost(ctx, "collector.test")
		cancel()
		if err == nil && len(got) == 1 && got[0] == addr {
			return true
		}
	}
	return false
}

// point makes collector.test resolve to addr.
func (d *dnsServer) point(addr string) {
	d.t.Helper()
	if err := os.WriteFile(d.hosts, []byte(addr+" collector.test\n"), 0o644); err != nil {
		d.t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP) // dnsmasq reads its hosts files again
	d.wait(addr)
}

// wait asks until collector.test resolves to addr.
func (d *dnsServer) wait(addr string) {
	d.t.Helper()
	if !d.resolves(addr, nil) {
		d.t.Fatalf("collector.test does not resolve to %s", addr)
	}
}

// freePort is a port free on 127.0.0.1 for both UDP and TCP, now.
func freePort(t *testing.T) int {
	t.Helper()
	for {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		c.Close()
		if err == nil {
			ln.Close()
			return port
		}
	}
}

// A TCP collector whose name moves to another address, then goes away: the
// exporter reconnects, resolving the name again through a real DNS server,
// and the collector at the new address decodes (goflow2) every flow sent
// after the move.
func TestTCPReconnectResolvesTargetAgain(t *testing.T) {
	lnA, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lnA.Close()
	port := lnA.Addr().(*net.TCPAddr).Port
	lnB, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer lnB.Close()
	dns := startDNS(t, "127.0.0.1")
	first, second := records(30), records(70)
	enrich(second)
	gotA := tcpCollect(lnA, len(first))
	e, err := New(Config{Target: fmt.Sprintf("collector.test:%d", port), Transport: "tcp", DomainID: 5, Resolver: dns.resolver,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Export(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	if res := <-gotA; res.err != nil || len(res.recs) != len(first) {
		t.Fatalf("collector at 127.0.0.1: %d flows, %v", len(res.recs), res.err)
	}
	dns.point("127.0.0.2")
	lnA.Close() // the old collector is gone (tcpCollect closed its connection)
	for deadline := time.Now().Add(10 * time.Second); e.Connected(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exporter did not notice the collector closing the connection")
		}
	}
	gotB := tcpCollect(lnB, len(second))
	if err := e.Export(context.Background(), second); err != nil {
		t.Fatalf("Export after the move: %v", err)
	}
	res := <-gotB
	if res.err != nil || len(res.recs) != len(second) {
		t.Fatalf("collector at 127.0.0.2: %d flows, %v", len(res.recs), res.err)
	}
	for i := range second {
		check(t, res.recs[i], &second[i], 5)
	}
	if c, l := e.Stats.Connects.Load(), e.Stats.FailedFlows.Load(); c != 2 || l != 0 {
		t.Errorf("%d connections, %d flows lost; want 2, 0", c, l)
	}
}

// A UDP collector whose name moves to another address: when the templates
// are due the exporter resolves the name again (a real DNS server), opens a
// socket to the new address, and the collector there decodes (goflow2)
// every flow sent after the move, templates first.
func TestUDPTargetResolvedAgain(t *testing.T) {
	colA := udpCollector(t)
	port := colA.LocalAddr().(*net.UDPAddr).Port
	colB, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer colB.Close()
	dns := startDNS(t, "127.0.0.1")
	const refresh = 50 * time.Millisecond
	e, err := New(Config{Target: fmt.Sprintf("collector.test:%d", port), DomainID: 6, Resolver: dns.resolver,
		TemplateRefresh: refresh})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	first, second := records(30), records(60)
	if err := e.Export(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	if _, recs := receive(t, colA, netflow.CreateTemplateSystem(), len(first)); len(recs) != len(first) {
		t.Fatalf("collector at 127.0.0.1: %d flows", len(recs))
	}
	dns.point("127.0.0.2")
	time.Sleep(refresh) // the templates are due: the name is asked again
	if err := e.Export(context.Background(), second); err != nil {
		t.Fatalf("Export after the move: %v", err)
	}
	msgs, recs := receive(t, colB, netflow.CreateTemplateSystem(), len(second)) // a new collector state: templates first
	for i := range second {
		check(t, recs[i], &second[i], 6)
	}
	if s := binary.BigEndian.Uint32(msgs[0][8:]); s != 0 {
		t.Errorf("first message to the new address: sequence %d, want 0 (a new session)", s)
	}
	if c, l := e.Stats.Connects.Load(), e.Stats.FailedFlows.Load(); c != 1 || l != 0 {
		t.Errorf("%d new sockets, %d flows lost; want 1, 0", c, l)
	}
}

// A TCP collector that hangs (accepts, never reads) and then comes back on
// the same address, healthy: the write deadline frees the exporter, which
// reconnects with backoff; the collector that came back decodes (goflow2)
// every flow of the next batch, templates first, sequence from 0.
func TestTCPReconnectsAfterStuckCollectorComesBack(t *testing.T) {
	addr, _, stop := neverReadsOn(t, "127.0.0.1:0")
	defer stop()
	e, err := New(Config{Target: addr, Transport: "tcp", DomainID: 9, WriteTimeout: 100 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	given := 0
	for e.Stats.FailedFlows.Load() == 0 { // until a write missed its deadline
		given += 5000
		e.Export(context.Background(), records(5000))
		if given > 1000000 {
			t.Fatal("no write ever missed its deadline")
		}
	}
	stop() // the hung collector is restarted: gone, then back on its address
	for deadline := time.Now().Add(10 * time.Second); e.Connected(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exporter did not notice the collector closing the connection")
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	before := e.Stats.Connects.Load()
	next := records(90)
	enrich(next)
	got := tcpCollect(ln, len(next))
	if err := e.Export(context.Background(), next); err != nil {
		t.Fatalf("Export once the collector is back: %v", err)
	}
	res := <-got
	if res.err != nil || len(res.recs) != len(next) {
		t.Fatalf("collector back: %d flows, %v", len(res.recs), res.err)
	}
	for i := range next {
		check(t, res.recs[i], &next[i], 9)
	}
	if s := binary.BigEndian.Uint32(res.msgs[0][8:]); s != 0 {
		t.Errorf("first message to the collector back: sequence %d, want 0", s)
	}
	if c := e.Stats.Connects.Load(); c <= before {
		t.Errorf("%d connections before, %d after: want a new one", before, c)
	}
	st := &e.Stats
	if got := st.Records.Load() + st.FailedFlows.Load(); got != uint64(given+len(next)) {
		t.Errorf("records written %d + flows lost %d = %d, want %d", st.Records.Load(), st.FailedFlows.Load(), got, given+len(next))
	}
}
