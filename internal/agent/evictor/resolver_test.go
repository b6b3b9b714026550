package evictor

import (
	"net/netip"
	"testing"
)

func TestAddrUnmapsIPv4(t *testing.T) {
	if a := addr(netip.MustParseAddr("::ffff:10.1.2.3").As16()); a.String() != "10.1.2.3" || !a.Is4() {
		t.Fatalf("got %v", a)
	}
	if a := addr(netip.MustParseAddr("fd00::1").As16()); a.String() != "fd00::1" {
		t.Fatalf("got %v", a)
	}
}

func TestResolverKeepsRemovedNamesTwoCycles(t *testing.T) {
	r := NewResolver()
	k := IfaceKey{Netns: 9, Ifindex: 3}
	r.Add(k, "veth0", "pod")
	r.Remove(k)
	for i := 0; i < 2; i++ {
		if n, ns := r.Lookup(k); n != "veth0" || ns != "pod" {
			t.Fatalf("cycle %d: %s/%s", i, ns, n)
		}
		r.Tick()
	}
	r.Tick()
	if n, ns := r.Lookup(k); n != "if3" || ns != "9" {
		t.Fatalf("after expiry: %s/%s, want 9/if3", ns, n)
	}
}
