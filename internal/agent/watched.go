package agent

import (
	"fmt"
	"slices"
	"strings"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
)

// watched is what the agent says it watches: the interfaces attached, by
// namespace, with their hook (tcx or clsact), and how many were skipped.
// Only the Run loop touches it.
type watched struct {
	attached map[string]map[int]iface // netns -> ifindex -> interface
	skipped  int
}

type iface struct{ name, hook string }

func newWatched() *watched { return &watched{attached: map[string]map[int]iface{}} }

func (w *watched) add(it ifaces.Interface, hook string) {
	if w.attached[it.Netns] == nil {
		w.attached[it.Netns] = map[int]iface{}
	}
	w.attached[it.Netns][it.Index] = iface{it.Name, hook}
}

// remove forgets an interface and reports whether it was attached.
func (w *watched) remove(it ifaces.Interface) bool {
	if _, ok := w.attached[it.Netns][it.Index]; !ok {
		return false
	}
	delete(w.attached[it.Netns], it.Index)
	if len(w.attached[it.Netns]) == 0 {
		delete(w.attached, it.Netns)
	}
	return true
}

// maxListed caps the interface names of the summary (a node can have
// hundreds of pod interfaces; each has its own "attached" line anyway).
const maxListed = 64

// summary is the start-up line, e.g. "watching 3 interfaces in 2
// namespaces (tcx): host: eth0, eth1; ns-a: veth-a".
func (w *watched) summary() string {
	if len(w.attached) == 0 {
		return "watching no interface: check --interfaces, --exclude-interfaces and --netns"
	}
	var nss, groups []string
	hooks := map[string]bool{}
	n, listed := 0, 0
	for ns := range w.attached {
		nss = append(nss, ns)
		n += len(w.attached[ns])
	}
	// The host first, then the named namespaces in order.
	slices.SortFunc(nss, func(a, b string) int {
		if (a == ifaces.Host) != (b == ifaces.Host) {
			if a == ifaces.Host {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, ns := range nss {
		var names []string
		for _, i := range w.attached[ns] {
			hooks[i.hook] = true
			names = append(names, i.name)
		}
		slices.Sort(names)
		if listed < maxListed {
			names = names[:min(len(names), maxListed-listed)]
			listed += len(names)
			groups = append(groups, ns+": "+strings.Join(names, ", "))
		}
	}
	hookList := make([]string, 0, len(hooks))
	for h := range hooks {
		hookList = append(hookList, h)
	}
	slices.Sort(hookList)
	s := fmt.Sprintf("watching %s in %s (%s): %s", count(n, "interface"), count(len(nss), "namespace"),
		strings.Join(hookList, ", "), strings.Join(groups, "; "))
	if listed < n {
		s += fmt.Sprintf("; … and %d more", n-listed)
	}
	return s
}

// count is "1 interface", "2 interfaces".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
