package datapath_test

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/capture"
)

// captureProgram is the capture program's name in bpf/budget.json.
const captureProgram = "flowlens_capture"

// captureFigures measures the capture program (bpf/capture.c, issue #32)
// as `flowlens capture` loads it, with a representative filter: every
// field of the filter set (the filter is load-time constants, so an
// empty one verifies fewer instructions; this is the costly case).
func captureFigures(t *testing.T) progBudget {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec("../capture/capture_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	f := capture.Filter{
		CIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.1.7/32"), netip.MustParsePrefix("fd00:10:244::/64")},
		PeerCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:10:245::/64")},
		SrcCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		DstCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")},
		Ports:     []uint16{5432, 443},
		SrcPorts:  []uint16{40000},
		DstPorts:  []uint16{53},
		Protocols: []uint8{6, 17},
		TCPFlags:  []uint16{0x02, 0x12},
		Direction: capture.Ingress,
	}
	in, err := capture.LoadInstance(f, 128, 64<<10)
	if err != nil {
		t.Fatalf("load the capture program: %v", err)
	}
	defer in.Close()
	return progFigures(t, in.Prog, len(spec.Programs[captureProgram].Instructions))
}
