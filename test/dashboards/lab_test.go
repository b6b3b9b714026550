package dashboardslab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// lab is three "workloads", each in its own network namespace, on one
// bridge in a fourth namespace the agent does not watch, like pods on a
// node; the bridge's own address plays a client outside the cluster:
//
//	frontend 10.99.0.1 ─┐
//	backend  10.99.0.2 ─┼─ br0 10.99.0.254 (switch namespace: the "outside")
//	database 10.99.0.3 ─┘
type lab struct {
	frontend, backend, database, outside *netlab.Netns
}

const (
	frontendIP = "10.99.0.1"
	backendIP  = "10.99.0.2"
	databaseIP = "10.99.0.3"
	outsideIP  = "10.99.0.254"
)

// subnetLabels names the lab's addresses for the collector, which sees
// them as addresses outside a cluster (enrichment off): workload labels.
const subnetLabels = "frontend=" + frontendIP + "/32,backend=" + backendIP + "/32,database=" + databaseIP + "/32"

func newLab(t *testing.T) *lab {
	t.Helper()
	sw := netlab.NewNetns(t, "switch")
	netlab.Quiet(t, sw)
	netlab.Bridge(t, sw, "br0")
	netlab.AddAddr(t, sw, "br0", outsideIP+"/24")
	l := &lab{outside: sw}
	for _, e := range []struct {
		ns   **netlab.Netns
		name string
		ip   string
	}{{&l.frontend, "frontend", frontendIP}, {&l.backend, "backend", backendIP}, {&l.database, "database", databaseIP}} {
		ns := netlab.NewNetns(t, e.name)
		netlab.Quiet(t, ns)
		port := "p-" + e.name[:4]
		netlab.Veth(t, ns, "eth0", sw, port)
		netlab.SetMaster(t, sw, port, "br0")
		netlab.AddAddr(t, ns, "eth0", e.ip+"/24")
		*e.ns = ns
	}
	// Drops: nftables rules in the receivers' namespaces. The database
	// loses 3 % of the backend's TCP segments at random (retransmits,
	// NETFILTER_DROP); the backend drops every datagram to UDP port 9999
	// (NETFILTER_DROP). Datagrams to ports nobody listens on are NO_SOCKET
	// drops (the port scan below).
	netlab.Run(t, l.database, "nft", "add table inet lab")
	netlab.Run(t, l.database, "nft", "add chain inet lab in { type filter hook input priority 0; }")
	netlab.Run(t, l.database, "nft", "add rule inet lab in tcp dport 5432 numgen random mod 100 < 3 drop")
	netlab.Run(t, l.backend, "nft", "add table inet lab")
	netlab.Run(t, l.backend, "nft", "add chain inet lab in { type filter hook input priority 0; }")
	netlab.Run(t, l.backend, "nft", "add rule inet lab in udp dport 9999 drop")
	// The backend's link is rate-limited (a queue builds up: the bulk
	// transfer to the database sees a higher RTT than the frontend's requests).
	netlab.Run(t, l.backend, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "40mbit", "burst", "32kbit", "latency", "20ms")
	return l
}

func (l *lab) netnsArg() string {
	return "--netns=" + l.frontend.Name + "," + l.backend.Name + "," + l.database.Name
}

// traffic runs the lab's workloads until ctx ends; wait returns once every
// goroutine has stopped and reports the first unexpected error.
type traffic struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error
	stop []io.Closer
}

func (tr *traffic) fail(err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.err == nil {
		tr.err = err
	}
}

func (tr *traffic) closeOnStop(c io.Closer) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.stop = append(tr.stop, c)
}

func (tr *traffic) loop(ctx context.Context, every time.Duration, fn func() error) {
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if err := fn(); err != nil && ctx.Err() == nil {
				tr.fail(err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

func (tr *traffic) wait() error {
	tr.mu.Lock()
	stop := tr.stop
	tr.stop = nil
	tr.mu.Unlock()
	for _, c := range stop {
		c.Close()
	}
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.stop { // accepted while stopping
		c.Close()
	}
	return tr.err
}

// listenTCP opens a TCP listener in ns and serves each connection with fn.
func (tr *traffic) listenTCP(ns *netlab.Netns, addr string, fn func(net.Conn)) error {
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		return err
	}
	tr.closeOnStop(ln)
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tr.closeOnStop(c)
			tr.wg.Add(1)
			go func() { defer tr.wg.Done(); defer c.Close(); fn(c) }()
		}
	}()
	return nil
}

func dialTCP(ns *netlab.Netns, addr string) (c net.Conn, err error) {
	err = ns.Do(func() error { c, err = net.DialTimeout("tcp", addr, 5*time.Second); return err })
	return c, err
}

// startTraffic starts the workloads, all bounded in rate, until ctx ends:
//
//   - outside → frontend:8000 TCP requests (300 B) and responses (2 KiB), 20/s
//     (the only flows first seen arriving: direction ingress);
//   - frontend → backend:8080 TCP requests (200 B) and responses (4 KiB), 50/s;
//   - backend → database:5432 a TCP bulk stream (about 1 MB/s) through 3 %
//     random loss;
//   - frontend → database:8125 UDP datagrams (300 B), 100/s;
//   - frontend → backend:9999 UDP, dropped by a firewall rule, 20/s;
//   - every 2.3 s (not a multiple of the agent's 1 s period: the bursts
//     fall at every phase of it, so some fill the map before a timer
//     eviction empties it) a "port scan": frontend → backend, one datagram to each of
//     300 closed ports (300 new flows at once: the agent's small flow map
//     overflows; NO_SOCKET drops);
//   - frontend → backend TCP connects (feature tcp): to the closed port
//     8081, refused, 10/s; to 8080, established and closed, 5/s.
func (l *lab) startTraffic(ctx context.Context) (*traffic, error) {
	tr := &traffic{}
	ctx, cancel := context.WithCancel(ctx)
	tr.closeOnStop(closerFunc(cancel))
	buf := make([]byte, 64<<10)

	// Requests from outside.
	err := tr.listenTCP(l.frontend, frontendIP+":8000", serve(300, 2048))
	if err != nil {
		return nil, err
	}
	web, err := dialTCP(l.outside, frontendIP+":8000")
	if err != nil {
		return nil, err
	}
	tr.closeOnStop(web)
	tr.loop(ctx, 50*time.Millisecond, request(web, 300, 2048, "outside → frontend"))

	// Requests from the frontend to the backend.
	err = tr.listenTCP(l.backend, backendIP+":8080", func(c net.Conn) {
		req, resp := make([]byte, 200), make([]byte, 4096)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	api, err := dialTCP(l.frontend, backendIP+":8080")
	if err != nil {
		return nil, err
	}
	tr.closeOnStop(api)
	tr.loop(ctx, 20*time.Millisecond, request(api, 200, 4096, "frontend → backend"))
	tr.loop(ctx, 100*time.Millisecond, func() error {
		c, err := dialTCP(l.frontend, backendIP+":8081")
		if err == nil {
			c.Close()
			return errors.New("frontend → backend:8081 connected, want refused")
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return fmt.Errorf("frontend → backend:8081: %w", err)
	})
	tr.loop(ctx, 200*time.Millisecond, func() error {
		c, err := dialTCP(l.frontend, backendIP+":8080")
		if err != nil {
			return fmt.Errorf("frontend → backend:8080 connect: %w", err)
		}
		return c.Close()
	})

	// Bulk stream through random loss.
	err = tr.listenTCP(l.database, databaseIP+":5432", func(c net.Conn) { io.Copy(io.Discard, c) })
	if err != nil {
		return nil, err
	}
	db, err := dialTCP(l.backend, databaseIP+":5432")
	if err != nil {
		return nil, err
	}
	tr.closeOnStop(db)
	tr.loop(ctx, 16*time.Millisecond, func() error {
		db.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := db.Write(buf[:16<<10]); err != nil {
			return fmt.Errorf("backend → database stream: %w", err)
		}
		return nil
	})

	// UDP: accepted, firewalled, and a port scan.
	statsd, err := netlab.UDPListen(l.database, databaseIP+":8125")
	if err != nil {
		return nil, err
	}
	tr.closeOnStop(statsd)
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		for {
			if _, _, err := statsd.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	var udp *net.UDPConn
	if err := l.frontend.Do(func() (err error) {
		udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(frontendIP)})
		return err
	}); err != nil {
		return nil, err
	}
	tr.closeOnStop(udp)
	metric := make([]byte, 300)
	tr.loop(ctx, 10*time.Millisecond, func() error {
		_, err := udp.WriteToUDP(metric, &net.UDPAddr{IP: net.ParseIP(databaseIP), Port: 8125})
		return err
	})
	tr.loop(ctx, 50*time.Millisecond, func() error {
		_, err := udp.WriteToUDP(metric[:100], &net.UDPAddr{IP: net.ParseIP(backendIP), Port: 9999})
		return err
	})
	tr.loop(ctx, 2300*time.Millisecond, func() error {
		for port := 20000; port < 20300; port++ {
			if _, err := udp.WriteToUDP(metric[:20], &net.UDPAddr{IP: net.ParseIP(backendIP), Port: port}); err != nil {
				if errors.Is(err, syscall.ECONNREFUSED) {
					continue // an earlier ICMP port unreachable, reported on this socket
				}
				return err
			}
		}
		return nil
	})
	return tr, nil
}

// serve answers each request of reqSize bytes with respSize bytes.
func serve(reqSize, respSize int) func(net.Conn) {
	return func(c net.Conn) {
		req, resp := make([]byte, reqSize), make([]byte, respSize)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	}
}

// request sends one request on c and reads the response.
func request(c net.Conn, reqSize, respSize int, what string) func() error {
	req, resp := make([]byte, reqSize), make([]byte, respSize)
	return func() error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(req); err != nil {
			return fmt.Errorf("%s request: %w", what, err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return fmt.Errorf("%s response: %w", what, err)
		}
		return nil
	}
}

type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }
