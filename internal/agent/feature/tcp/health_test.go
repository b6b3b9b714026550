package tcp_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/feature/tcp"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// tcpFlow is one JSON line of the agent with the feature's fields, by
// their contract names.
type tcpFlow struct {
	agenttest.JSONFlow
	TCPRole           string `json:"tcp_role"`
	TCPConnects       uint64 `json:"tcp_connects"`
	TCPRefused        uint64 `json:"tcp_refused"`
	TCPTimeouts       uint64 `json:"tcp_timeouts"`
	TCPSynRetrans     uint64 `json:"tcp_syn_retrans"`
	TCPResets         uint64 `json:"tcp_resets"`
	TCPZeroWindows    uint64 `json:"tcp_zero_windows"`
	TCPHandshakeNs    uint64 `json:"tcp_handshake_ns"`
	TCPHandshakeMaxNs uint64 `json:"tcp_handshake_max_ns"`
}

// stop stops the agent and decodes every line it printed with the tcp
// fields (agenttest.Stop checks the core contract fields).
func stop(t *testing.T, h *agenttest.Harness) []tcpFlow {
	t.Helper()
	h.Stop()
	var out []tcpFlow
	sc := bufio.NewScanner(strings.NewReader(h.Output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var f tcpFlow
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		out = append(out, f)
	}
	return out
}

// sum adds up the tcp counters of the records m selects.
type sums struct {
	recs                                                         int
	connects, refused, timeouts, synRetrans, resets, zeroWindows uint64
	roles                                                        map[string]int
	causes                                                       map[string]int
	handshakeMax                                                 uint64
}

func sum(flows []tcpFlow, m agenttest.Match) sums {
	s := sums{roles: map[string]int{}, causes: map[string]int{}}
	for _, f := range flows {
		if !m.OK(f.JSONFlow) {
			continue
		}
		s.recs++
		s.connects += f.TCPConnects
		s.refused += f.TCPRefused
		s.timeouts += f.TCPTimeouts
		s.synRetrans += f.TCPSynRetrans
		s.resets += f.TCPResets
		s.zeroWindows += f.TCPZeroWindows
		s.roles[f.TCPRole]++
		if f.DropCause != "" {
			s.causes[f.DropCause]++
		}
		s.handshakeMax = max(s.handshakeMax, f.TCPHandshakeMaxNs)
	}
	return s
}

func tcpCounters(t *testing.T, ns *netlab.Netns) map[string]uint64 {
	return netlab.NetCounters(t, ns, "snmp", "Tcp:")
}

func tcpExt(t *testing.T, ns *netlab.Netns) map[string]uint64 {
	return netlab.NetCounters(t, ns, "netstat", "TcpExt:")
}

// 100 connects to a closed port: the client's flows count 100 connects, all
// refused, as many as its kernel's failed attempts (TcpAttemptFails); the
// server's flows count the 100 RSTs its kernel sent (TcpOutRsts).
func TestRefused(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tcp")
	a0, b0 := tcpCounters(t, p.A), tcpCounters(t, p.B)
	const n = 100
	addr := net.JoinHostPort(p.IPB, "7201")
	for i := range n {
		err := p.A.Do(func() error {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		})
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("connect %d: %v, want connection refused", i, err)
		}
	}
	a1, b1 := tcpCounters(t, p.A), tcpCounters(t, p.B)
	flows := stop(t, h)
	c := sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 7201, Proto: 6})
	s := sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: 7201, Proto: 6})
	fails, rsts := a1["AttemptFails"]-a0["AttemptFails"], b1["OutRsts"]-b0["OutRsts"]
	t.Logf("client: %d records, connects %d refused %d timeouts %d (TcpAttemptFails +%d); server: %d records, resets %d (TcpOutRsts +%d)",
		c.recs, c.connects, c.refused, c.timeouts, fails, s.recs, s.resets, rsts)
	if c.connects != n || c.refused != n || fails != n || c.timeouts != 0 || c.synRetrans != 0 {
		t.Errorf("client: connects %d refused %d timeouts %d syn_retrans %d, TcpAttemptFails +%d; want %d, %d, 0, 0, %d",
			c.connects, c.refused, c.timeouts, c.synRetrans, fails, n, n, n)
	}
	if s.resets != n || rsts != n || s.connects != 0 {
		t.Errorf("server: resets %d connects %d, TcpOutRsts +%d; want %d, 0, %d", s.resets, s.connects, rsts, n, n)
	}
	if c.roles["client"] != c.recs {
		t.Errorf("client roles %v over %d records, want client on every one", c.roles, c.recs)
	}
}

// 10 connects whose SYNs nftables drops at the server, with two SYN
// retries in the client's namespace: 10 timeouts, 20 SYNs sent again (the
// client kernel's RetransSegs), and the netfilter drop on the same records.
func TestTimeoutsWithDropCause(t *testing.T) {
	p := agenttest.NewPair(t)
	if err := netlab.Sysctl(p.A, "net.ipv4.tcp_syn_retries", "2"); err != nil {
		t.Fatal(err)
	}
	// Kernels from 6.5 on space the first SYN retries linearly
	// (tcp_syn_linear_timeouts, 4), and give up by time, not count: 0 gives
	// back the exponential back-off, under which 2 retries are 2 SYNs sent again.
	netlab.Sysctl(p.A, "net.ipv4.tcp_syn_linear_timeouts", "0") // absent before 6.5: nothing to undo
	netlab.Run(t, p.B, "nft", "add", "table", "inet", "fltcp")
	netlab.Run(t, p.B, "nft", "add chain inet fltcp in { type filter hook input priority 0; }")
	netlab.Run(t, p.B, "nft", "add rule inet fltcp in tcp dport 7202 drop")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tcp,drops")
	a0 := tcpCounters(t, p.A)
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	addr := net.JoinHostPort(p.IPB, "7202")
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.A.Do(func() error {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					c.Close()
				}
				return err
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, syscall.ETIMEDOUT) {
			t.Fatalf("connect %d: %v, want a timeout", i, err)
		}
	}
	a1 := tcpCounters(t, p.A)
	flows := stop(t, h)
	c := sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 7202, Proto: 6})
	retrans, fails := a1["RetransSegs"]-a0["RetransSegs"], a1["AttemptFails"]-a0["AttemptFails"]
	t.Logf("client: %d records, connects %d timeouts %d syn_retrans %d refused %d (RetransSegs +%d, AttemptFails +%d), drop causes %v",
		c.recs, c.connects, c.timeouts, c.synRetrans, c.refused, retrans, fails, c.causes)
	if c.connects != n || c.timeouts != n || c.refused != 0 || fails != n {
		t.Errorf("connects %d timeouts %d refused %d, AttemptFails +%d; want %d, %d, 0, %d", c.connects, c.timeouts, c.refused, fails, n, n, n)
	}
	if c.synRetrans != 2*n || retrans != 2*n {
		t.Errorf("syn_retrans %d, RetransSegs +%d; want %d", c.synRetrans, retrans, 2*n)
	}
	// Every record that says a timeout says why: the netfilter drop.
	for _, f := range flows {
		if f.TCPTimeouts > 0 && f.DropCause != "NETFILTER_DROP" {
			t.Errorf("record %s:%d → %s:%d has %d timeouts and drop cause %q, want NETFILTER_DROP",
				f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.TCPTimeouts, f.DropCause)
		}
	}
}

// 50 successful connects: 50 connects, none failed, the roles on both
// directions, and each connection's handshake latency above 0 and no
// larger than the connect time its client measured.
func TestEstablished(t *testing.T) {
	p := agenttest.NewPair(t)
	var ln net.Listener
	if err := p.B.Do(func() (err error) { ln, err = net.Listen("tcp", net.JoinHostPort(p.IPB, "7203")); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tcp")
	const n = 50
	took := map[uint16]time.Duration{} // client port → its measured connect time
	for i := range n {
		err := p.A.Do(func() error {
			start := time.Now()
			c, err := net.Dial("tcp", net.JoinHostPort(p.IPB, "7203"))
			if err != nil {
				return err
			}
			took[uint16(c.LocalAddr().(*net.TCPAddr).Port)] = time.Since(start)
			return c.Close()
		})
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the closes' last segments
	flows := stop(t, h)
	c := sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 7203, Proto: 6})
	s := sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: 7203, Proto: 6})
	t.Logf("client: %d records, connects %d, roles %v, max handshake %v; server: %d records, roles %v",
		c.recs, c.connects, c.roles, time.Duration(c.handshakeMax), s.recs, s.roles)
	if c.connects != n || c.refused != 0 || c.timeouts != 0 || c.synRetrans != 0 || c.resets != 0 {
		t.Errorf("client: connects %d refused %d timeouts %d syn_retrans %d resets %d; want %d and no failure",
			c.connects, c.refused, c.timeouts, c.synRetrans, c.resets, n)
	}
	if s.connects != 0 || s.synRetrans != 0 || s.resets != 0 {
		t.Errorf("server: connects %d syn_retrans %d resets %d, want 0", s.connects, s.synRetrans, s.resets)
	}
	if c.roles["client"] != c.recs || s.roles["server"] != s.recs {
		t.Errorf("roles: client side %v, server side %v; want client, server on every record", c.roles, s.roles)
	}
	shakes := 0
	for _, f := range flows {
		if f.SrcAddr != p.IPA || f.DstPort != 7203 || f.TCPHandshakeNs == 0 {
			continue
		}
		shakes++
		d, ok := took[f.SrcPort]
		if !ok || f.TCPHandshakeMaxNs > uint64(d) || f.TCPHandshakeNs > f.TCPHandshakeMaxNs {
			t.Errorf("port %d: handshake %d ns (max %d), measured connect %v", f.SrcPort, f.TCPHandshakeNs, f.TCPHandshakeMaxNs, d)
		}
	}
	if shakes != n {
		t.Errorf("%d client records with a handshake latency, want %d", shakes, n)
	}
}

// A receiver that stops reading: its flow's zero windows are its kernel's
// TCPToZeroWindowAdv.
func TestZeroWindow(t *testing.T) {
	p := agenttest.NewPair(t)
	var ln net.Listener
	if err := p.B.Do(func() (err error) { ln, err = net.Listen("tcp", net.JoinHostPort(p.IPB, "7204")); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c // and never read
	}()
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tcp")
	b0 := tcpExt(t, p.B)
	var conn net.Conn
	if err := p.A.Do(func() (err error) { conn, err = net.Dial("tcp", net.JoinHostPort(p.IPB, "7204")); return }); err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	conn.SetWriteDeadline(time.Now().Add(1500 * time.Millisecond))
	n, _ := conn.Write(make([]byte, 64<<20)) // blocks once the receiver's window is closed
	b1 := tcpExt(t, p.B)
	srv.Close()
	conn.Close()
	flows := stop(t, h)
	s := sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: 7204, Proto: 6})
	c := sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 7204, Proto: 6})
	adv := b1["TCPToZeroWindowAdv"] - b0["TCPToZeroWindowAdv"]
	t.Logf("wrote %d bytes; receiver: zero windows %d (TCPToZeroWindowAdv +%d, TCPWantZeroWindowAdv +%d); sender: %d",
		n, s.zeroWindows, adv, b1["TCPWantZeroWindowAdv"]-b0["TCPWantZeroWindowAdv"], c.zeroWindows)
	if adv == 0 || s.zeroWindows != adv || c.zeroWindows != 0 {
		for k, v := range b1 { // what the receiver's kernel did instead (pruning: RcvPruned, TCPRcvQDrop)
			if d := v - b0[k]; d != 0 {
				t.Logf("receiver TcpExt %s +%d", k, d)
			}
		}
		t.Errorf("receiver's zero windows %d, TCPToZeroWindowAdv +%d, sender's %d; want equal, above 0, and 0",
			s.zeroWindows, adv, c.zeroWindows)
	}
}

// A connection closed with SO_LINGER 0: one reset, on the closer's flow.
// The client has the higher address here: its flow is not the key of the
// connection in tcp_conns (the canonical one of the two, bpf/tcp.h), and
// the roles still come out right.
func TestLingerZeroReset(t *testing.T) {
	p := agenttest.NewPair(t)
	var ln net.Listener
	if err := p.A.Do(func() (err error) { ln, err = net.Listen("tcp", net.JoinHostPort(p.IPA, "7205")); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// Its answer acknowledges the client's data: no segment of the
		// server is left in flight to meet the closed socket (which
		// would answer it with a second RST).
		buf := make([]byte, 64)
		if _, err := c.Read(buf); err == nil {
			c.Write([]byte("ok"))
		}
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		c.Close()
	}()
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tcp")
	a0 := tcpCounters(t, p.B)
	err := p.B.Do(func() error {
		c, err := net.Dial("tcp", net.JoinHostPort(p.IPA, "7205"))
		if err != nil {
			return err
		}
		if _, err := c.Write([]byte("hello")); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
			return err
		}
		c.(*net.TCPConn).SetLinger(0)
		return c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	a1 := tcpCounters(t, p.B)
	flows := stop(t, h)
	c := sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Dport: 7205, Proto: 6})
	s := sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 7205, Proto: 6})
	rsts := a1["OutRsts"] - a0["OutRsts"]
	t.Logf("closer: resets %d (TcpOutRsts +%d), connects %d; peer: resets %d", c.resets, rsts, c.connects, s.resets)
	if c.resets != 1 || rsts != 1 || s.resets != 0 || c.connects != 1 {
		t.Errorf("closer's resets %d (TcpOutRsts +%d), peer's %d, connects %d; want 1, 1, 0, 1", c.resets, rsts, s.resets, c.connects)
	}
	if c.roles["client"] != c.recs || s.roles["server"] != s.recs {
		t.Errorf("roles: client side %v, server side %v; want client, server on every record", c.roles, s.roles)
	}
}

// A connection alive across several evictions keeps its role in every
// period; and a connect whose SYN and SYN-ACK fall in different periods
// (the server's first SYN is dropped: the SYN-ACK answers the client's
// second, a second later, five periods on) is counted once.
func TestAcrossEvictions(t *testing.T) {
	p := agenttest.NewPair(t)
	netlab.Run(t, p.B, "nft", "add", "table", "inet", "fltcp")
	netlab.Run(t, p.B, "nft", "add chain inet fltcp in { type filter hook input priority 0; }")
	// numgen inc: the first SYN evaluated gets 0 (dropped), the second 1.
	netlab.Run(t, p.B, "nft", "add rule inet fltcp in tcp dport 7206 tcp flags & (syn | ack) == syn numgen inc mod 2 == 0 drop")
	var ln net.Listener
	if err := p.B.Do(func() (err error) { ln, err = net.Listen("tcp", net.JoinHostPort(p.IPB, "7206")); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	echo := make(chan struct{})
	go func() {
		defer close(echo)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			c.Write(buf[:n])
		}
		c.Close()
	}()
	const period = 200 * time.Millisecond
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tcp", fmt.Sprintf("--cache-active-timeout=%s", period))
	a0 := tcpCounters(t, p.A)
	var took time.Duration
	err := p.A.Do(func() error {
		start := time.Now()
		c, err := net.Dial("tcp", net.JoinHostPort(p.IPB, "7206"))
		if err != nil {
			return err
		}
		took = time.Since(start)
		buf := make([]byte, 64)
		for range 12 { // 12 round trips over about 8 periods
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
			if _, err := c.Read(buf); err != nil {
				return err
			}
			time.Sleep(period * 2 / 3)
		}
		return c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-echo
	a1 := tcpCounters(t, p.A)
	flows := stop(t, h)
	c := sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 7206, Proto: 6})
	s := sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: 7206, Proto: 6})
	retrans := a1["RetransSegs"] - a0["RetransSegs"]
	t.Logf("connect took %v; client: %d records, roles %v, connects %d, syn_retrans %d (RetransSegs +%d), handshake max %v; server: %d records, roles %v",
		took, c.recs, c.roles, c.connects, c.synRetrans, retrans, time.Duration(c.handshakeMax), s.recs, s.roles)
	if c.recs < 5 || s.recs < 5 {
		t.Fatalf("%d client and %d server records, want at least 5 periods each", c.recs, s.recs)
	}
	if c.roles["client"] != c.recs || s.roles["server"] != s.recs {
		t.Errorf("roles: client side %v, server side %v; want client, server in every period", c.roles, s.roles)
	}
	if c.connects != 1 || c.synRetrans != 1 || retrans != 1 || c.refused != 0 || c.timeouts != 0 {
		t.Errorf("connects %d syn_retrans %d (RetransSegs +%d) refused %d timeouts %d; want 1, 1, 1, 0, 0",
			c.connects, c.synRetrans, retrans, c.refused, c.timeouts)
	}
	if c.handshakeMax < uint64(time.Second) || c.handshakeMax > uint64(took) {
		t.Errorf("handshake %v, want from the first SYN (a second before its answer) and at most the measured %v",
			time.Duration(c.handshakeMax), took)
	}
}

// A client whose socket is not on the node (here: SYNs written by hand on a
// raw socket, so no TCP socket gives up) and whose SYNs a firewall drops:
// the agent reports the connect abandoned once its SYNs stopped for the
// give-up interval (shortened here), once, on the client's flow, with the
// drop's cause.
func TestAbandonedWithoutSocket(t *testing.T) {
	defer tcp.SetSweep(time.Second, 0)()
	p := agenttest.NewPair(t)
	netlab.Run(t, p.B, "nft", "add", "table", "inet", "fltcp")
	netlab.Run(t, p.B, "nft", "add chain inet fltcp in { type filter hook input priority 0; }")
	netlab.Run(t, p.B, "nft", "add rule inet fltcp in tcp dport 7207 drop")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tcp,drops", "--cache-active-timeout=300ms")
	syn := make([]byte, 20)
	binary.BigEndian.PutUint16(syn[0:], 45678)
	binary.BigEndian.PutUint16(syn[2:], 7207)
	binary.BigEndian.PutUint32(syn[4:], 12345) // its sequence number: the same in each copy
	syn[12], syn[13] = 5<<4, 0x02              // 20 bytes, SYN
	binary.BigEndian.PutUint16(syn[14:], 64240)
	err := p.A.Do(func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		to := &syscall.SockaddrInet4{}
		copy(to.Addr[:], net.ParseIP(p.IPB).To4())
		for range 3 { // the first SYN and two retransmissions
			if err := syscall.Sendto(fd, syn, 0, to); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the give-up interval, then a few sweeps
	flows := stop(t, h)
	c := sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 45678, Dport: 7207, Proto: 6})
	t.Logf("client: %d records, connects %d, syn_retrans %d, timeouts %d, roles %v, drop causes %v",
		c.recs, c.connects, c.synRetrans, c.timeouts, c.roles, c.causes)
	if c.connects != 1 || c.synRetrans != 2 || c.timeouts != 1 || c.refused != 0 {
		t.Errorf("connects %d syn_retrans %d timeouts %d refused %d; want 1, 2, 1, 0", c.connects, c.synRetrans, c.timeouts, c.refused)
	}
	for _, f := range flows {
		if f.TCPTimeouts > 0 && (f.DropCause != "NETFILTER_DROP" || f.TCPRole != "client") {
			t.Errorf("the timeout's record: drop cause %q, role %q; want NETFILTER_DROP, client", f.DropCause, f.TCPRole)
		}
	}
}
