//go:build soak

package soak

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// traffic is the soak's load, at a modest rate (the host is shared):
//   - 10 short TCP connections a second (request, answer, close);
//   - one long TCP stream, 8 KiB every 20 ms;
//   - 100 new UDP flows a second (a socket, so a source port, each), a
//     quarter of them to closed ports (ICMP port unreachable back);
//   - a DNS query every 500 ms to a server that answers, one every 2 s to
//     one that never does (the dns feature's timeouts);
//   - an ICMP echo every 200 ms;
//   - namespace churn: a namespace every 3 s, with a veth to cli carrying a
//     little UDP, deleted 15 s later, so about five live at a time and their
//     interfaces come and go under the agent, in cli and in new namespaces.
type traffic struct {
	wg        sync.WaitGroup
	conns     atomic.Int64
	nsAlive   atomic.Int64
	nsCreated atomic.Int64
	mu        sync.Mutex
	errs      map[string]int // errors by generator, logged at the end
	t         *testing.T
}

func (tr *traffic) fail(what string, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.errs[what] == 0 {
		tr.t.Logf("traffic %s: %v (later errors only counted)", what, err)
	}
	tr.errs[what]++
}

func (tr *traffic) wait() {
	tr.wg.Wait()
	for what, n := range tr.errs {
		tr.t.Logf("traffic %s: %d errors", what, n)
	}
}

// every runs fn every d until ctx ends.
func (tr *traffic) every(ctx context.Context, d time.Duration, fn func(i int)) {
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(d)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				fn(i)
			}
		}
	}()
}

func startTraffic(t *testing.T, ctx context.Context, cli, srv *netlab.Netns, dir string) *traffic {
	tr := &traffic{errs: map[string]int{}, t: t}

	listen := func(ns *netlab.Netns, addr string) net.Listener {
		var l net.Listener
		if err := ns.Do(func() (err error) { l, err = net.Listen("tcp", addr); return }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	serve := func(l net.Listener, handle func(net.Conn)) {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); handle(c) }()
			}
		}()
	}
	dial := func(addr string) (net.Conn, error) {
		var c net.Conn
		err := cli.Do(func() (err error) { c, err = net.DialTimeout("tcp", addr, 2*time.Second); return })
		return c, err
	}

	// Short TCP connections.
	serve(listen(srv, "10.99.0.2:8080"), func(c net.Conn) {
		buf := make([]byte, 512)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); err == nil {
			c.Write([]byte("ok\n"))
		}
	})
	req := make([]byte, 200)
	tr.every(ctx, 100*time.Millisecond, func(int) {
		c, err := dial("10.99.0.2:8080")
		if err != nil {
			tr.fail("tcp short", err)
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(req); err != nil {
			tr.fail("tcp short", err)
			return
		}
		if _, err := c.Read(make([]byte, 16)); err != nil {
			tr.fail("tcp short", err)
			return
		}
		tr.conns.Add(1)
	})

	// The long stream, reconnected if it breaks.
	serve(listen(srv, "10.99.0.2:8081"), func(c net.Conn) { io.Copy(io.Discard, c) })
	var stream net.Conn
	chunk := make([]byte, 8<<10)
	tr.every(ctx, 20*time.Millisecond, func(int) {
		if stream == nil {
			c, err := dial("10.99.0.2:8081")
			if err != nil {
				tr.fail("tcp stream", err)
				return
			}
			stream = c
		}
		stream.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := stream.Write(chunk); err != nil {
			tr.fail("tcp stream", err)
			stream.Close()
			stream = nil
		}
	})

	// UDP: many flows, one listener; a quarter to closed ports.
	udp, err := netlab.UDPListen(srv, "10.99.0.2:9000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	go io.Copy(io.Discard, readerOf(udp))
	payload := make([]byte, 100)
	tr.every(ctx, 100*time.Millisecond, func(i int) {
		for j := range 10 {
			port := 9000
			if j%4 == 3 {
				port = 9001 + (i*10+j)%99
			}
			if err := netlab.UDPSend(cli, "", fmt.Sprintf("10.99.0.2:%d", port), payload, 1); err != nil {
				tr.fail("udp", err)
			}
		}
	})

	// DNS: answered (10.99.0.2:53) and never answered (10.99.0.3:53).
	netlab.SlowDNS(t, srv, "10.99.0.2:53", 0)
	mute, err := netlab.UDPListen(srv, "10.99.0.3:53")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go io.Copy(io.Discard, readerOf(mute))
	tr.every(ctx, 500*time.Millisecond, func(i int) {
		rc, err := netlab.AskDNS(cli, "", "10.99.0.2:53", netlab.DNSQuery(uint16(i), fmt.Sprintf("q%d.soak.test", i%50)), time.Second)
		if err == nil && rc != 0 {
			err = fmt.Errorf("rcode %d", rc)
		}
		if err != nil {
			tr.fail("dns answered", err)
		}
		if i%4 == 0 {
			if _, err := netlab.AskDNS(cli, "", "10.99.0.3:53", netlab.DNSQuery(uint16(i), "lost.soak.test"), 10*time.Millisecond); err != nil {
				tr.fail("dns unanswered", err)
			}
		}
	})

	// ICMP echo from a raw socket in cli; replies read and dropped.
	var icmp net.PacketConn
	if err := cli.Do(func() (err error) { icmp, err = net.ListenPacket("ip4:icmp", "10.99.0.1"); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { icmp.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := icmp.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	dst := &net.IPAddr{IP: net.IPv4(10, 99, 0, 2)}
	tr.every(ctx, 200*time.Millisecond, func(i int) {
		if _, err := icmp.WriteTo(echo(uint16(i)), dst); err != nil {
			tr.fail("icmp", err)
		}
	})

	// Namespace churn.
	type churned struct {
		s    *netlab.Script
		ns   *netlab.Netns
		addr string
		at   time.Time
	}
	var live []churned
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		defer func() {
			for _, c := range live {
				c.s.Close()
			}
		}()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for len(live) > 0 && time.Since(live[0].at) >= 15*time.Second {
				if err := live[0].s.Close(); err != nil {
					tr.fail("netns delete", err)
				}
				live = live[1:]
				tr.nsAlive.Add(-1)
			}
			if i%3 == 0 {
				n := int(tr.nsCreated.Load())
				c := churned{s: &netlab.Script{}, at: time.Now(), addr: fmt.Sprintf("10.97.%d.2", n%200)}
				err := c.s.Build(func(t netlab.T) {
					c.ns = netlab.NewNetnsIn(t, dir, "churn")
					netlab.Quiet(t, c.ns)
					peer := fmt.Sprintf("fls-y%d", n%1000)
					netlab.Veth(t, c.ns, "fls-x0", cli, peer)
					netlab.AddAddr(t, c.ns, "fls-x0", c.addr+"/24")
					netlab.AddAddr(t, cli, peer, fmt.Sprintf("10.97.%d.1/24", n%200))
				})
				if err != nil {
					tr.fail("netns create", err)
					c.s.Close()
				} else {
					live = append(live, c)
					tr.nsAlive.Add(1)
					tr.nsCreated.Add(1)
				}
			}
			for _, c := range live { // a little UDP over each live veth
				if err := netlab.UDPSend(cli, "", c.addr+":7000", payload, 2); err != nil {
					tr.fail("churn udp", err)
				}
			}
		}
	}()
	return tr
}

type pconnReader struct{ c net.PacketConn }

func (r pconnReader) Read(b []byte) (int, error) { n, _, err := r.c.ReadFrom(b); return n, err }

func readerOf(c net.PacketConn) io.Reader { return pconnReader{c} }

// echo is an ICMP echo request, id 0x5157, sequence seq, 32 bytes of data.
func echo(seq uint16) []byte {
	b := make([]byte, 8+32)
	b[0] = 8 // echo request
	b[4], b[5] = 0x51, 0x57
	b[6], b[7] = byte(seq>>8), byte(seq)
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	cs := ^uint16(sum)
	b[2], b[3] = byte(cs>>8), byte(cs)
	return b
}
