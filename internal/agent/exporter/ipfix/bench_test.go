package ipfix

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// BenchmarkEviction is the ipfix exporter's cost per flow at 100k flows per
// eviction (exportertest.Run), messages of the default size under a
// 1500-byte MTU (1400 bytes over UDP, 65535 over TCP). transport=udp: to a
// local UDP socket nobody reads (the kernel drops what overflows its
// buffer: each message's send is paid in full, with loopback's receive path
// on top); transport=udp-wire: to an address behind a tun device (root);
// transport=tcp: to a local TCP reader that discards, each op waiting until
// it has read every byte.
func BenchmarkEviction(b *testing.B) {
	b.Run("transport=udp", func(b *testing.B) {
		col, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		defer col.Close()
		e, err := New(Config{Target: col.LocalAddr().String(), MaxMessageBytes: DefaultMaxMessageBytes})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		exportertest.Run(b, e, nil)
	})
	b.Run("transport=udp-wire", func(b *testing.B) {
		// To a collector behind a tun device in a namespace of its own,
		// whose queue nobody reads: each message takes the send path to a
		// device and is dropped there, as on a NIC, without loopback's
		// receive side.
		ns := netlab.NewNetns(b, "ipfix-bench")
		netlab.Tun(b, ns, "ipfix-tun0")
		netlab.AddAddr(b, ns, "ipfix-tun0", "192.0.2.1/24")
		var e *Exporter
		if err := ns.Do(func() (err error) {
			e, err = New(Config{Target: "192.0.2.2:4739"})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		exportertest.Run(b, e, nil)
	})
	b.Run("transport=tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		var read atomic.Int64
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 1<<20)
			for {
				n, err := c.Read(buf)
				read.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
		e, err := New(Config{Target: ln.Addr().String(), Transport: "tcp"})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		exportertest.Run(b, e, func() {
			deadline := time.Now().Add(30 * time.Second)
			for read.Load() < int64(e.Stats.Bytes.Load()) {
				if time.Now().After(deadline) {
					b.Fatalf("the reader has %d of %d bytes", read.Load(), e.Stats.Bytes.Load())
				}
				time.Sleep(20 * time.Microsecond)
			}
		})
	})
}
