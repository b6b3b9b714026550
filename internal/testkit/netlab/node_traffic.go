package netlab

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// NodePod is one pod of a NodeLab as a cluster would know it, and the one
// Kubernetes namespace its traffic goes to (Traffic): so what a pod's
// interface sent is what its namespace sent to that one.
type NodePod struct {
	Ns                  *Netns
	Namespace, Name, IP string
	SendsTo             string // "" for a pod that sends nothing
	Iface               NodeIface
}

// Pods are the lab's pods: a1 and a2 in namespace alpha, b1 and b2 in
// beta (b1 is the Service's backend), c1 in gamma on node B.
func (l *NodeLab) Pods() []NodePod {
	pod := func(ns *Netns, k8sNS, name, ip, to string) NodePod {
		return NodePod{ns, k8sNS, name, ip, to, NodeIface{ns, "nb-eth0", FramingEth}}
	}
	return []NodePod{
		pod(l.A1, "alpha", "a1", NodeA1IP, "beta"),
		pod(l.A2, "alpha", "a2", NodeA2IP, "gamma"),
		pod(l.B1, "beta", "b1", NodeB1IP, "alpha"), // the bulk transfer's ACKs
		pod(l.B2, "beta", "b2", NodeB2IP, ""),
		pod(l.C1, "gamma", "c1", NodeC1IP, "alpha"),
	}
}

// NodeTraffic is what Traffic sends.
type NodeTraffic struct {
	ServiceDatagrams int // a1 → 10.0.0.77:80 (UDP, 200 bytes), DNATed to b1:8080
	DroppedDatagrams int // a1 → b1:9999, dropped by node A's forward chain
	FragDatagrams    int // a1 → b1:7001, FragSize bytes each: fragmented by a1
	FragSize         int
	TCPBytes         int // a1 → b1:5201, one connection: GSO buffers
	OverlayDatagrams int // a2 → c1:7002 (300 bytes), through VXLAN
	OverlayReplies   int // c1 → a2:7003, back through VXLAN
	TunDatagrams     int // the client 10.231.8.1 → b2:7004, written into nb-tun
	NodeDatagrams    int // node A itself (192.168.231.1, host network) → 10.0.0.77:80, DNATed in output
	// Packets no flow can fully read: into nb-tun, IPv4 first fragments
	// too short for the UDP header and IPv6 packets with seven extension
	// headers (JunkSrcIP → JunkDstIP, neither forwarded); from node B to node A's
	// uplink, frames of a non-IP EtherType (0x88b5, local experimental).
	TinyFragments, LongIPv6, NonIP int
}

// DefaultNodeTraffic is the traffic of the node-balance test: a second or
// so on two cores.
var DefaultNodeTraffic = NodeTraffic{
	ServiceDatagrams: 100, DroppedDatagrams: 30, FragDatagrams: 20, FragSize: 3000, TCPBytes: 8 << 20,
	OverlayDatagrams: 200, OverlayReplies: 50, TunDatagrams: 50, NodeDatagrams: 40, TinyFragments: 5, LongIPv6: 5, NonIP: 5,
}

// Traffic sends tr and returns once every datagram that should arrive has
// arrived and the TCP connection is closed on both sides; what is dropped
// on purpose is simply sent.
func (l *NodeLab) Traffic(tr NodeTraffic) error {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	recv := func(ns *Netns, addr string, n int) error {
		c, err := UDPListen(ns, addr)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for i := 0; i < n; i++ {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, _, err := c.ReadFromUDP(buf); err != nil {
					errs <- fmt.Errorf("%s on %s: %d of %d datagrams: %w", addr, ns, i, n, err)
					return
				}
			}
		}()
		return nil
	}
	b1 := func(port int) string { return fmt.Sprintf("%s:%d", NodeB1IP, port) }
	for _, r := range []struct {
		ns   *Netns
		addr string
		n    int
	}{
		{l.B1, b1(BackendPort), tr.ServiceDatagrams + tr.NodeDatagrams}, {l.B1, b1(7001), tr.FragDatagrams},
		{l.C1, NodeC1IP + ":7002", tr.OverlayDatagrams}, {l.A2, NodeA2IP + ":7003", tr.OverlayReplies},
		{l.B2, NodeB2IP + ":7004", tr.TunDatagrams},
	} {
		if err := recv(r.ns, r.addr, r.n); err != nil {
			return err
		}
	}
	send := []struct {
		ns       *Netns
		src, dst string
		size, n  int
	}{
		{l.A1, NodeA1IP + ":6001", fmt.Sprintf("%s:%d", ServiceIP, ServicePort), 200, tr.ServiceDatagrams},
		{l.A1, NodeA1IP + ":6002", b1(DropPort), 100, tr.DroppedDatagrams},
		{l.A1, NodeA1IP + ":6003", b1(7001), tr.FragSize, tr.FragDatagrams},
		{l.A2, NodeA2IP + ":6004", NodeC1IP + ":7002", 300, tr.OverlayDatagrams},
		{l.C1, NodeC1IP + ":6005", NodeA2IP + ":7003", 300, tr.OverlayReplies},
		{l.NodeA, NodeAUpIP + ":6007", fmt.Sprintf("%s:%d", ServiceIP, ServicePort), 150, tr.NodeDatagrams},
	}
	for _, s := range send {
		if err := pacedSend(s.ns, s.src, s.dst, make([]byte, s.size), s.n); err != nil {
			return fmt.Errorf("%s → %s: %w", s.src, s.dst, err)
		}
	}
	if err := l.bulk(tr.TCPBytes); err != nil {
		return err
	}
	if err := l.writeTun(tr); err != nil {
		return err
	}
	if err := l.sendNonIP(tr.NonIP); err != nil {
		return err
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// bulk sends n bytes a1 → b1:5201 over one TCP connection and returns
// once both sides have closed it.
func (l *NodeLab) bulk(n int) error {
	var ln net.Listener
	if err := l.B1.Do(func() (err error) { ln, err = net.Listen("tcp", NodeB1IP+":5201"); return }); err != nil {
		return err
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		got, err := io.Copy(io.Discard, c)
		if err == nil && got != int64(n) {
			err = fmt.Errorf("bulk transfer: received %d bytes of %d", got, n)
		}
		done <- err
	}()
	var c net.Conn
	if err := l.A1.Do(func() (err error) {
		// Any local port: a1 closes first, so the last one waits in
		// TIME_WAIT, and Traffic may run again (a benchmark's rounds).
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(NodeA1IP)}, Timeout: 5 * time.Second}
		c, err = d.Dial("tcp", NodeB1IP+":5201")
		return err
	}); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	for sent := 0; sent < n; {
		k := min(len(buf), n-sent)
		if _, err := c.Write(buf[:k]); err != nil {
			c.Close()
			return fmt.Errorf("bulk transfer: %w", err)
		}
		sent += k
	}
	// Closing sends our FIN; b1 reads to it, then closes: its FIN, and
	// our last ACK, which the kernel sends at once.
	if err := c.Close(); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("bulk transfer: not received in 30s")
	}
}

// writeTun writes the tun client's datagrams and the unreadable packets
// into nb-tun: each write is one packet node A receives on it.
func (l *NodeLab) writeTun(tr NodeTraffic) error {
	var pkts [][]byte
	for i := 0; i < tr.TunDatagrams; i++ {
		pkts = append(pkts, packet.Cat(packet.IPv4(packet.ProtoUDP, NodeExtIP, NodeB2IP, packet.UDPLen+100, packet.Checksum()),
			packet.UDP(40000, 7004, 100)))
	}
	for i := 0; i < tr.TinyFragments; i++ {
		// 4 bytes of UDP header, more fragments to come (none will).
		pkts = append(pkts, packet.Cat(packet.IPv4(packet.ProtoUDP, JunkSrcIP, JunkDstIP, 4,
			packet.Frag(packet.MF, 0), packet.ID(uint16(4000+i)), packet.Checksum()), []byte{0x9c, 0x41, 0x1b, 0x5c}))
	}
	for i := 0; i < tr.LongIPv6; i++ {
		// Hop-by-Hop, then six Destination Options headers, then UDP.
		exts := packet.Options(packet.ProtoDstOpts, 0)
		for j := 0; j < 6; j++ {
			next := packet.ProtoDstOpts
			if j == 5 {
				next = packet.ProtoUDP
			}
			exts = packet.Cat(exts, packet.Options(next, 0))
		}
		pkts = append(pkts, packet.Cat(packet.IPv6(packet.ProtoHopByHop, JunkSrcIP6, JunkDstIP6, len(exts)+packet.UDPLen+8),
			exts, packet.UDP(40000, 7004, 8)))
	}
	for _, p := range pkts {
		if _, err := l.tun.Write(p); err != nil {
			return fmt.Errorf("write nb-tun: %w", err)
		}
	}
	return nil
}

// sendNonIP sends n frames of EtherType 0x88b5 from node B's uplink to
// node A's.
func (l *NodeLab) sendNonIP(n int) error {
	var dst packet.MAC
	copy(dst[:], l.upA)
	frame := packet.Cat(packet.Eth(0x88b5, packet.MACs(dst, packet.SrcMAC)), packet.Payload(46))
	return l.NodeB.Do(func() error {
		ifi, err := net.InterfaceByName("nb-up")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}
		copy(sa.Addr[:], dst[:])
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, frame, 0, sa); err != nil {
				return fmt.Errorf("non-IP frame on node B's nb-up: %w", err)
			}
		}
		return nil
	})
}

// pacedSend is UDPSend in bursts of 10 datagrams a millisecond apart:
// back to back, a few hundred datagrams crossing five devices can overflow
// a CPU's backlog on a busy machine, and a datagram lost on the way would
// leave a receiver waiting.
func pacedSend(ns *Netns, src, dst string, payload []byte, n int) error {
	for sent := 0; sent < n; sent += 10 {
		if err := UDPSend(ns, src, dst, payload, min(10, n-sent)); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
