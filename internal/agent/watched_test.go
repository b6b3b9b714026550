package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
)

func TestWatchedSummary(t *testing.T) {
	w := newWatched()
	if got, want := w.summary(), "watching no interface: check --interfaces, --exclude-interfaces and --netns"; got != want {
		t.Errorf("empty: %q, want %q", got, want)
	}
	w.add(ifaces.Interface{Name: "eth0", Index: 2, Netns: ifaces.Host}, "tcx")
	if got, want := w.summary(), "watching 1 interface in 1 namespace (tcx): host: eth0"; got != want {
		t.Errorf("one: %q, want %q", got, want)
	}
	w.add(ifaces.Interface{Name: "veth1", Index: 5, Netns: "b"}, "clsact")
	w.add(ifaces.Interface{Name: "veth0", Index: 4, Netns: "a"}, "tcx")
	w.add(ifaces.Interface{Name: "docker0", Index: 3, Netns: ifaces.Host}, "tcx")
	if got, want := w.summary(), "watching 4 interfaces in 3 namespaces (clsact, tcx): host: docker0, eth0; a: veth0; b: veth1"; got != want {
		t.Errorf("several: %q, want %q", got, want)
	}
	if !w.remove(ifaces.Interface{Name: "veth1", Index: 5, Netns: "b"}) || w.remove(ifaces.Interface{Name: "veth1", Index: 5, Netns: "b"}) {
		t.Error("remove: want true once, then false")
	}
	// The names listed are capped; the count is not.
	for i := range 100 {
		w.add(ifaces.Interface{Name: fmt.Sprintf("p%03d", i), Index: 10 + i, Netns: "pods"}, "tcx")
	}
	s := w.summary()
	if !strings.HasPrefix(s, "watching 103 interfaces in 3 namespaces (tcx): host: docker0, eth0; a: veth0; pods: p000, ") ||
		!strings.HasSuffix(s, ", p060; … and 39 more") {
		t.Errorf("capped: %q", s)
	}
}
