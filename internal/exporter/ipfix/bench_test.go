package ipfix

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/exporter/exportertest"
)

// BenchmarkEviction is the ipfix exporter's cost per flow at 100k flows per
// eviction (exportertest.Run), messages of the default size. transport=udp:
// to a local UDP socket nobody reads (the kernel drops what overflows its
// buffer: each message's send is paid in full); transport=tcp: to a local
// TCP reader that discards, each op waiting until it has read every byte.
func BenchmarkEviction(b *testing.B) {
	b.Run("transport=udp", func(b *testing.B) {
		col, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		defer col.Close()
		e, err := New(Config{Target: col.LocalAddr().String()})
		if err != nil {
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
