package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// TestLabs: both benchmark labs, built with netlab outside a test's
// cleanups (a Script), carry the client's traffic to the server's address
// and its extra addresses, and close removes their namespaces.
func TestLabs(t *testing.T) {
	netlab.Require(t)
	for _, tc := range []struct {
		name  string
		build func() (*lab, error)
		dsts  []string
	}{
		{"router", newLab, append([]string{srvAddr}, srvExtraAddrs...)},
		{"bridge", func() (*lab, error) { return newBridgeLab(true) }, []string{srvAddr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.build()
			if err != nil {
				t.Fatal(err)
			}
			for _, dst := range tc.dsts {
				if err := echo(l, dst); err != nil {
					l.close()
					t.Fatalf("client to %s and back: %v", dst, err)
				}
			}
			l.close()
			for _, ns := range []string{l.cli, l.rtr, l.srv} {
				if _, err := os.Stat(filepath.Join(netlab.DefaultDir, ns)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("namespace %s left after close: %v", ns, err)
				}
			}
		})
	}
}

// echo sends a datagram from the client to dst, which sends it back: both
// directions are routed (and the neighbours static) as the benchmarks need.
func echo(l *lab, dst string) error {
	srv, err := netlab.UDPListen(l.srvNS, dst+":7")
	if err != nil {
		return err
	}
	defer srv.Close()
	cli, err := netlab.UDPListen(l.cliNS, cliAddr+":4007")
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.WriteToUDP([]byte("lab"), &net.UDPAddr{IP: net.ParseIP(dst), Port: 7}); err != nil {
		return err
	}
	buf := make([]byte, 16)
	srv.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, from, err := srv.ReadFromUDP(buf)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if _, err := srv.WriteToUDP(buf[:n], from); err != nil {
		return err
	}
	cli.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, _, err = cli.ReadFromUDP(buf); err != nil || string(buf[:n]) != "lab" {
		return fmt.Errorf("client: %q, %v", buf[:n], err)
	}
	return nil
}
