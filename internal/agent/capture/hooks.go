package capture

import (
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifname"
)

// hookSet is a running capture's hooks: every watched interface its filter
// names, in the directions it asks, those attached when it starts and those
// the agent attaches while it runs (Datapath.OnAttach: a pod created during
// the capture). The reader names a packet's namespace and interface through
// it (lookup).
type hookSet struct {
	c       *Capturer
	f       Filter
	names   ifname.Set
	conf    captureCapFilter
	snaplen uint32
	slot    int
	spec    *ebpf.CollectionSpec
	s       *session

	mu      sync.RWMutex
	nss     []namespace // by the index the programs carry (cap_ns)
	nsIndex map[string]int
	ifNames map[ifKey]datapath.AttachedInterface
	// attachErr is the last hook that did not attach (the interface went
	// away since it was listed).
	attachErr error
}

// matching is the attached interfaces the filter names, by namespace then
// index (so that namespace indexes follow the listing).
func matching(attached []datapath.AttachedInterface, f Filter, names ifname.Set) []datapath.AttachedInterface {
	var out []datapath.AttachedInterface
	for _, it := range attached {
		if len(f.Interfaces) == 0 || names.Match(it.Name) {
			out = append(out, it)
		}
	}
	slices.SortFunc(out, func(a, b datapath.AttachedInterface) int {
		if a.Netns != b.Netns {
			if a.Netns < b.Netns {
				return -1
			}
			return 1
		}
		return a.Index - b.Index
	})
	return out
}

// add hooks the capture to an interface the filter names, in the filter's
// directions; an interface hooked already is left as it is. It returns how
// many hooks it attached. A program that does not load is an error; a hook
// that does not attach (the interface went away since) is skipped, logged
// and kept in attachErr.
func (h *hookSet) add(it datapath.AttachedInterface) (int, error) {
	if len(h.f.Interfaces) > 0 && !h.names.Match(it.Name) {
		return 0, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ns, ok := h.nsIndex[it.Netns]
	if !ok {
		ns = len(h.nss)
		h.nsIndex[it.Netns] = ns
		h.nss = append(h.nss, namespace{name: it.Netns, cookie: it.NetnsCookie})
	}
	key := ifKey{ns, uint32(it.Index)}
	if old, ok := h.ifNames[key]; ok && old.Name == it.Name {
		return 0, nil
	}
	h.ifNames[key] = it
	var attached int
	for _, egress := range []bool{false, true} {
		if (egress && h.f.Direction == Ingress) || (!egress && h.f.Direction == Egress) {
			continue
		}
		k := instanceKey{ns, egress, it.L3}
		if h.s.progs[k] == nil {
			p, err := loadInstance(h.spec, k, h.conf, h.snaplen, h.s)
			if err != nil {
				return attached, err
			}
			h.s.progs[k] = p
		}
		b, err := h.c.cfg.Datapath.AttachBeside(it.Interface, egress, h.s.progs[k], h.slot)
		if err != nil {
			h.c.log.Warn("capture: interface skipped", "interface", it.Name, "netns", it.Netns, "error", err)
			h.attachErr = err
			continue
		}
		h.s.hooks = append(h.s.hooks, b)
		attached++
	}
	return attached, nil
}

// later hooks an interface the agent attached after the capture started.
func (h *hookSet) later(it datapath.AttachedInterface) {
	n, err := h.add(it)
	if err != nil {
		h.c.log.Warn("capture: a new interface was not hooked", "interface", it.Name, "netns", it.Netns, "error", err)
	}
	if n > 0 {
		h.c.log.Info("capture: hooked a new interface", "interface", it.Name, "netns", it.Netns, "hooks", n)
	}
}

// lookup names the namespace and interface of a packet's cap_ns and
// ifindex.
func (h *hookSet) lookup(ns int, ifindex uint32) (namespace, datapath.AttachedInterface, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if ns >= len(h.nss) {
		return namespace{}, datapath.AttachedInterface{}, fmt.Errorf("capture: namespace index %d unknown", ns)
	}
	return h.nss[ns], h.ifNames[ifKey{ns, ifindex}], nil
}
