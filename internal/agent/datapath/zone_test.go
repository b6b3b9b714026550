package datapath_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// LoopbackZone folds a cookie to 1..255, so any 255 consecutive cookies
// get distinct zones, and 0 only to 0 (no namespace). The kernel side,
// bpf/zone.h, gives the same values: the test-run tests build their
// expected keys with LoopbackZone (test-run packets are on loopback).
func TestLoopbackZone(t *testing.T) {
	for _, tc := range []struct {
		cookie uint64
		zone   uint8
	}{{0, 0}, {1, 1}, {254, 254}, {255, 255}, {256, 1}, {510, 255}, {0xc0ffee, uint8(0xc0ffee % 255)}, {^uint64(0), 255}} {
		if got := datapath.LoopbackZone(tc.cookie); got != tc.zone {
			t.Errorf("LoopbackZone(%d) = %d, want %d", tc.cookie, got, tc.zone)
		}
	}
	seen := map[uint8]uint64{}
	for c := uint64(1000); c < 1255; c++ {
		z := datapath.LoopbackZone(c)
		if prev, ok := seen[z]; ok || z == 0 {
			t.Fatalf("cookies %d and %d share zone %d", prev, c, z)
		}
		seen[z] = c
	}
}
