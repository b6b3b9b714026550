package ipfix

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/ipfixsize"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// Over UDP the default message size is the path MTU the kernel knows for
// the target, less 100 bytes: 1400 under a 1500-byte MTU, 8900 under 9000,
// IPv4 and IPv6, the smallest size under a small MTU, about 64 KiB on
// loopback. The routes go through a tun device in a namespace of its own
// (root).
func TestMessageSizeFromPathMTU(t *testing.T) {
	col := udpCollector(t) // loopback
	e, err := New(Config{Target: col.LocalAddr().String()})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if n := e.cfg.MaxMessageBytes; n < 65536-mtuMargin-1 || n > ipfixsize.MaxUDP {
		t.Errorf("loopback: %d bytes, want its MTU (65535 or 65536) less %d", n, mtuMargin)
	}

	ns := netlab.NewNetns(t, "ipfix-mtu")
	_, tun := netlab.Tun(t, ns, "ipfix-tun0")
	netlab.AddAddr(t, ns, "ipfix-tun0", "192.0.2.1/24")
	netlab.AddAddr(t, ns, "ipfix-tun0", "2001:db8::1/64")
	h, err := netlab.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, tc := range []struct {
		mtu    int
		target string
		want   int
	}{
		{1500, "192.0.2.2:4739", 1400},
		{9000, "192.0.2.2:4739", 8900},
		{9000, "[2001:db8::2]:4739", 8900},
		{1280, "[2001:db8::2]:4739", 1180},
		{1100, "192.0.2.2:4739", ipfixsize.Min}, // last: IPv6 needs 1280
	} {
		if err := h.LinkSetMTU(tun, tc.mtu); err != nil {
			t.Fatal(err)
		}
		var e *Exporter
		if err := ns.Do(func() (err error) {
			e, err = New(Config{Target: tc.target})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		e.Close()
		if e.cfg.MaxMessageBytes != tc.want {
			t.Errorf("MTU %d to %s: %d bytes, want %d", tc.mtu, tc.target, e.cfg.MaxMessageBytes, tc.want)
		}
	}
}
