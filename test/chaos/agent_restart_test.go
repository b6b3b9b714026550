//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The agent killed with SIGKILL in the middle of an eviction, and started
// again on the same interfaces, attached with clsact (--tc-attach=clsact)
// or tcx. The killed agent leaves its cls_bpf filters (clsact) and nothing
// (tcx: its links went with its file descriptors); the new agent removes
// the filters it finds, so each interface has exactly one set of flowlens
// programs, and every packet sent once it is ready is counted exactly once
// (its records' sum equals the veths' own counters). The packets that were
// in the killed agent's maps are lost: the test measures them against the
// veths' counters and checks that the new agent counts none of them (it
// does not count them twice, nor at all: nothing counts them).
func TestAgentRestartAfterSIGKILL(t *testing.T) {
	netlab.Require(t)
	// clsact-then-tcx: a kernel upgraded under a clsact agent, or
	// --tc-attach changed, so the filters left are not replaced in place.
	for _, m := range []struct{ first, second string }{{"clsact", "clsact"}, {"tcx", "tcx"}, {"clsact", "tcx"}} {
		name := m.first
		if m.second != m.first {
			name += "-then-" + m.second
		}
		t.Run(name, func(t *testing.T) { testAgentRestart(t, m.first, m.second) })
	}
}

const (
	floodFlows = 30000 // flows in the eviction the kill interrupts
	floodPort  = 20000 // their destination ports: floodPort .. floodPort+floodFlows-1
	afterSport = 5555  // the flow sent once the new agent is ready
	afterDport = 6666
	afterN     = 1000
)

func testAgentRestart(t *testing.T, mode, second string) {
	p := agenttest.NewPair(t)
	if mode == "tcx" || second == "tcx" {
		if err := tcxSupported(p); err != nil {
			testkit.Need(t, "tcx links (Linux ≥ 6.6)", err)
		}
	}
	flags := func(mode string) []string {
		return []string{p.NetnsArg(), "--cache-active-timeout=2s", "--log-level=debug", "--metrics-address=",
			"--tc-attach=" + map[string]string{"clsact": "clsact", "tcx": "auto"}[mode]}
	}
	args := flags(mode)

	// 1. The first agent, killed as an eviction of floodFlows flows starts.
	first := startAgent(t, args)
	first.awaitReady(t)
	first.await(t, "eviction done") // a whole period ahead of the flood
	_, _, txA0, _ := netlab.LinkStats(p.A, p.IfA)
	if err := p.A.Do(func() error {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(p.IPA), Port: 4000})
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range floodFlows {
			if _, err := c.WriteToUDP([]byte("flood"), &net.UDPAddr{IP: net.ParseIP(p.IPB), Port: floodPort + i}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, _, txA1, _ := netlab.LinkStats(p.A, p.IfA)
	flood := txA1 - txA0 // the flood's packets (not B's ICMP errors)
	first.hold.Store(true)
	first.killAt.Store(true) // SIGKILL as the next eviction starts
	if err := first.wait(20 * time.Second); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("first agent: %v, want killed by SIGKILL", err)
	}
	log := first.log()
	last := strings.LastIndex(log, `msg="eviction started"`)
	if last < 0 || strings.Contains(log[last:], `msg="eviction done"`) {
		t.Fatalf("the kill did not land inside an eviction; log tail:\n%s", tail(log, 2000))
	}
	// What it left: its filters (clsact), nothing (tcx).
	leftIn, leftEg := flowlensFilters(t, p)
	tcxIn, tcxEg := flowlensTCX(t, p, mode)
	wantLeft := map[string]int{"clsact": 2, "tcx": 0}[mode]
	if leftIn != wantLeft || leftEg != wantLeft || tcxIn != 0 || tcxEg != 0 {
		t.Fatalf("after SIGKILL: flowlens cls_bpf filters %d ingress %d egress, tcx programs %d %d; want %d %d 0 0",
			leftIn, leftEg, tcxIn, tcxEg, wantLeft, wantLeft)
	}
	firstFlows := agenttest.ParseFlows(t, first.stdout())
	var floodCounted uint64
	for _, f := range firstFlows {
		if f.SrcAddr == p.IPA && f.DstPort >= floodPort && f.DstPort < floodPort+floodFlows {
			floodCounted += f.Packets
		}
	}

	// 2. The second agent, on the same interfaces.
	base := txPackets(p)
	next := startAgent(t, flags(second))
	next.awaitReady(t)
	in, eg := flowlensFilters(t, p)
	tin, teg := flowlensTCX(t, p, second)
	want := map[string][4]int{"clsact": {2, 2, 0, 0}, "tcx": {0, 0, 2, 2}}[second]
	if got := [4]int{in, eg, tin, teg}; got != want {
		t.Errorf("after the restart: flowlens cls_bpf filters (ingress, egress) and tcx programs (ingress, egress) over both veths %v, want %v", got, want)
	}
	if q, wantQ := clsactQdiscs(t, p), map[string]int{"clsact": 2, "tcx": 0}[second]; q != wantQ {
		t.Errorf("after the restart: %d clsact qdiscs on the veths, want %d (the killed agent's taken over, or deleted with tcx)", q, wantQ)
	}
	removed := strings.Count(next.log(), "removed the filters an earlier flowlens agent left")
	if wantRemoved := map[string]int{"clsact": 2, "tcx": 0}[mode]; removed != wantRemoved {
		t.Errorf("the second agent removed filters on %d interfaces, want %d", removed, wantRemoved)
	}
	agenttest.MustListen(t, p.B, fmt.Sprintf("%s:%d", p.IPB, afterDport))
	if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, afterSport), fmt.Sprintf("%s:%d", p.IPB, afterDport), make([]byte, 100), afterN); err != nil {
		t.Fatal(err)
	}
	sent := txPackets(p) - base
	if err := next.stop(); err != nil {
		t.Fatalf("second agent: %v", err)
	}
	flows := agenttest.ParseFlows(t, next.stdout())
	var total, after, floodAgain uint64
	for _, f := range flows {
		total += f.Packets
		switch {
		case f.SrcPort == afterSport && f.DstPort == afterDport:
			after += f.Packets
		case f.SrcAddr == p.IPA && f.DstPort >= floodPort && f.DstPort < floodPort+floodFlows:
			floodAgain += f.Packets
		}
	}
	t.Logf("%s: flood %d packets over %d flows; the killed agent printed %d of them before the kill, "+
		"%d (%.1f%%) were in its maps and are lost, counted nowhere; after the restart the veths sent %d packets, "+
		"the new agent counted %d (%d of the known flow, %d sent), %d of the flood",
		t.Name(), flood, floodFlows, floodCounted, flood-floodCounted, 100*float64(flood-floodCounted)/float64(flood),
		sent, total, after, afterN, floodAgain)
	if after != afterN || total != sent || floodAgain != 0 {
		t.Errorf("after the restart: %d packets of the known flow (want %d), %d in all (the veths sent %d), %d of the killed agent's flood (want 0)",
			after, afterN, total, sent, floodAgain)
	}
	if floodCounted >= flood {
		t.Errorf("the killed agent printed all %d flood packets: the kill was not mid-eviction", flood)
	}
}

// txPackets is what both veth ends have sent: every packet crossing the
// pair, once.
func txPackets(p *agenttest.Pair) uint64 {
	_, _, a, _ := netlab.LinkStats(p.A, p.IfA)
	_, _, b, _ := netlab.LinkStats(p.B, p.IfB)
	return a + b
}

// flowlensFilters counts flowlens's cls_bpf filters over both veth ends.
func flowlensFilters(t *testing.T, p *agenttest.Pair) (ingress, egress int) {
	t.Helper()
	for _, end := range []struct {
		ns  *netlab.Netns
		if_ string
	}{{p.A, p.IfA}, {p.B, p.IfB}} {
		if err := end.ns.Do(func() error {
			l, err := netlink.LinkByName(end.if_)
			if err != nil {
				return err
			}
			in, eg, err := datapath.LegacyFilters(l.Attrs().Index)
			ingress, egress = ingress+in, egress+eg
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return
}

// clsactQdiscs counts the clsact qdiscs over both veth ends.
func clsactQdiscs(t *testing.T, p *agenttest.Pair) (n int) {
	t.Helper()
	for _, end := range []struct {
		ns  *netlab.Netns
		if_ string
	}{{p.A, p.IfA}, {p.B, p.IfB}} {
		if err := end.ns.Do(func() error {
			l, err := netlink.LinkByName(end.if_)
			if err != nil {
				return err
			}
			qs, err := netlink.QdiscList(l)
			for _, q := range qs {
				if q.Type() == "clsact" {
					n++
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return
}

// flowlensTCX counts the programs named flowlens_* attached with tcx over
// both veth ends.
func flowlensTCX(t *testing.T, p *agenttest.Pair, mode string) (ingress, egress int) {
	t.Helper()
	if mode != "tcx" {
		return 0, 0
	}
	for _, end := range []struct {
		ns  *netlab.Netns
		if_ string
	}{{p.A, p.IfA}, {p.B, p.IfB}} {
		if err := end.ns.Do(func() error {
			l, err := netlink.LinkByName(end.if_)
			if err != nil {
				return err
			}
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: at})
				if err != nil {
					return err
				}
				for _, ap := range r.Programs {
					prog, err := ebpf.NewProgramFromID(ap.ID)
					if err != nil {
						continue // gone meanwhile
					}
					info, err := prog.Info()
					prog.Close()
					if err == nil && strings.HasPrefix(info.Name, "flowlens_") {
						if at == ebpf.AttachTCXIngress {
							ingress++
						} else {
							egress++
						}
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return
}

// tcxSupported says whether this kernel attaches tcx links (on a veth of
// the pair, at once detached).
func tcxSupported(p *agenttest.Pair) error {
	return p.A.Do(func() error {
		l, err := netlink.LinkByName(p.IfA)
		if err != nil {
			return err
		}
		_, err = link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		return err
	})
}

// agentProc is a flowlens-agent process: its stdout (JSON flows) and its
// stderr (log lines), read as they come; killAt makes the reader SIGKILL
// it the moment an "eviction started" line arrives.
type agentProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	errLog bytes.Buffer
	lines  chan string
	killAt atomic.Bool
	// hold, while set, stops reading stdout: the agent's writes block once
	// the pipe is full, its export queue fills, and an eviction waits for
	// room (its export budget, half the period), so a kill on "eviction
	// started" lands inside the eviction however late the reader is.
	hold    atomic.Bool
	exited  chan struct{} // closed once the process has exited; then exitErr
	exitErr error
	readWG  sync.WaitGroup
}

func startAgent(t *testing.T, args []string) *agentProc {
	t.Helper()
	a := &agentProc{cmd: exec.Command(bin["flowlens-agent"], args...), lines: make(chan string, 4096), exited: make(chan struct{})}
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := a.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := testkit.StartOwned(a.cmd); err != nil {
		t.Fatal(err)
	}
	a.readWG.Add(2)
	go func() {
		defer a.readWG.Done()
		var buf [64 << 10]byte
		for {
			for a.hold.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			n, err := stdout.Read(buf[:])
			a.mu.Lock()
			a.out.Write(buf[:n])
			a.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer a.readWG.Done()
		defer close(a.lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if a.killAt.Load() && strings.Contains(line, `msg="eviction started"`) {
				a.cmd.Process.Signal(syscall.SIGKILL)
				a.killAt.Store(false)
				a.hold.Store(false)
			}
			a.mu.Lock()
			a.errLog.WriteString(line + "\n")
			a.mu.Unlock()
			select {
			case a.lines <- line:
			default:
			}
		}
	}()
	go func() {
		a.readWG.Wait() // the pipes are read to their end before Wait closes them
		a.exitErr = a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		a.wait(10 * time.Second)
		if t.Failed() {
			t.Logf("agent %v log:\n%s", args, tail(a.log(), 6000))
		}
	})
	return a
}

// await waits for a log line holding msg="<msg>...".
func (a *agentProc) await(t *testing.T, msg string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-a.lines:
			if !ok {
				t.Fatalf("agent exited before logging %q:\n%s", msg, tail(a.log(), 3000))
			}
			if strings.Contains(line, `msg="`+msg) {
				return
			}
		case <-deadline:
			t.Fatalf("agent did not log %q in 30s:\n%s", msg, tail(a.log(), 3000))
		}
	}
}

// awaitReady waits for the summary line the agent logs once every
// interface present at start is attached.
func (a *agentProc) awaitReady(t *testing.T) { t.Helper(); a.await(t, "watching 2 interfaces") }

func (a *agentProc) stop() error {
	a.cmd.Process.Signal(syscall.SIGTERM)
	return a.wait(30 * time.Second)
}

var errStillRunning = errors.New("still running")

// wait waits up to d for the process to exit, and returns how it did.
func (a *agentProc) wait(d time.Duration) error {
	select {
	case <-a.exited:
		return a.exitErr
	case <-time.After(d):
		return errStillRunning
	}
}

func (a *agentProc) stdout() string { a.mu.Lock(); defer a.mu.Unlock(); return a.out.String() }
func (a *agentProc) log() string    { a.mu.Lock(); defer a.mu.Unlock(); return a.errLog.String() }
