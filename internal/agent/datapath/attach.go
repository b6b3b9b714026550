package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
)

// Legacy cls_bpf filters get this priority and handle, so the agent finds
// (and removes) exactly its own filters. Priority 1 runs them first.
const (
	legacyPriority = 1
	legacyHandle   = 0xf10e
)

// The names of flowlens's cls_bpf filters (TCA_BPF_NAME, which the kernel
// keeps and lists): the marker by which an agent recognises the filters an
// earlier agent left, whatever priority or handle that agent's version
// used.
const (
	legacyNameIngress = "flowlens_ingress"
	legacyNameEgress  = "flowlens_egress"
)

type attachKey struct {
	netns   uint64
	ifindex int
}

// attachment is one interface's pair of hooks: two tcx links, or two
// cls_bpf filters (and maybe a clsact qdisc we created).
type attachment struct {
	iface      ifaces.Interface
	links      []link.Link
	legacy     bool
	addedQdisc bool
	adoptQdisc bool // the qdisc exists with only an earlier agent's filters on it: removed at detach too
	l3         bool // no Ethernet header: the _l3 programs
}

// Attach hooks the programs to the interface's ingress and egress. Attaching
// an already attached interface is a no-op. The OnAttach callbacks run after
// a new attach, without the datapath's lock.
func (d *Datapath) Attach(iface ifaces.Interface) error {
	a, err := d.attach(iface)
	if a != nil {
		d.watchers.notify(AttachedInterface{Interface: a.iface, L3: a.l3})
	}
	return err
}

// attach is Attach under the lock; it returns the new attachment, or nil
// when the interface was attached already or on error.
func (d *Datapath) attach(iface ifaces.Interface) (*attachment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := attachKey{iface.NetnsCookie, iface.Index}
	if _, ok := d.attached[key]; ok {
		return nil, nil
	}
	progs, err := d.programsFor(iface.NetnsCookie, false)
	if err != nil {
		return nil, err
	}
	// The interface's rule bits go in before its programs: a packet never
	// sees the interface without them.
	if err := d.flowRulesAttach(iface); err != nil {
		d.release(iface.NetnsCookie)
		return nil, err
	}
	a := &attachment{iface: iface}
	err = ifaces.InNetns(iface.NetnsPath, func() error {
		l, err := netlink.LinkByIndex(iface.Index)
		if err != nil {
			return fmt.Errorf("link: %w", err)
		}
		a.l3 = !hasEthernetHeader(l)
		if a.l3 { // the L3 pair, loaded with the first such device
			if _, err := d.programsFor(iface.NetnsCookie, true); err != nil {
				return err
			}
		}
		// An earlier agent killed with SIGKILL left its cls_bpf filters
		// (tcx links go with the process): remove them first, so that
		// one set of flowlens programs runs, this agent's.
		removed, others := removeStale(l)
		if removed > 0 {
			d.log.Info("removed the filters an earlier flowlens agent left", "interface", iface.Name,
				"netns", iface.Netns, "filters", removed)
			// Its clsact qdisc, when nothing else uses it, is ours to
			// remove at detach.
			a.adoptQdisc = !others
		}
		if !d.cfg.ForceLegacyTC {
			err := attachTCX(a, progs)
			if err == nil && a.adoptQdisc {
				// The earlier agent's clsact qdisc, empty now: tcx needs none.
				if err := delClsact(iface.Index); err != nil {
					d.log.Warn("removing the clsact qdisc an earlier flowlens agent left", "interface", iface.Name, "error", err)
				}
			}
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return err
			}
			d.log.Info("tcx not supported by this kernel: attaching with clsact + cls_bpf", "interface", iface.Name)
		}
		return attachLegacy(a, progs)
	})
	if err != nil {
		d.flowRulesDetach(iface)
		d.release(iface.NetnsCookie)
		return nil, fmt.Errorf("attach to %s (netns %s): %w", iface.Name, iface.Netns, err)
	}
	d.attached[key] = a
	return a, nil
}

// hasEthernetHeader says whether the device's frames start with an Ethernet
// header at the TC hooks. Devices without one (tun, WireGuard: link/none;
// ipip, sit, gre, ip6tnl) get the _l3 programs, which parse from the IP
// header. Loopback frames carry a (zeroed) Ethernet header.
func hasEthernetHeader(l netlink.Link) bool {
	switch l.Attrs().EncapType {
	case "ether", "loopback":
		return true
	}
	return false
}

// pair is the ingress and egress program an attachment uses.
func (a *attachment) pair(p *Programs) (ingress, egress *ebpf.Program) {
	if a.l3 {
		return p.IngressL3, p.EgressL3
	}
	return p.Ingress, p.Egress
}

func attachTCX(a *attachment, p *Programs) error {
	ingress, egress := a.pair(p)
	for _, h := range []struct {
		prog *ebpf.Program
		typ  ebpf.AttachType
	}{{ingress, ebpf.AttachTCXIngress}, {egress, ebpf.AttachTCXEgress}} {
		// Head: see every packet before another program can redirect or drop it.
		l, err := link.AttachTCX(link.TCXOptions{Interface: a.iface.Index, Program: h.prog, Attach: h.typ, Anchor: link.Head()})
		if err != nil {
			for _, l := range a.links {
				l.Close()
			}
			a.links = nil
			return err
		}
		a.links = append(a.links, l)
	}
	return nil
}

func legacyFilter(ifindex int, parent uint32, prog *ebpf.Program) *netlink.BpfFilter {
	name := legacyNameIngress
	if parent == netlink.HANDLE_MIN_EGRESS {
		name = legacyNameEgress
	}
	fd := -1 // deleting needs no program
	if prog != nil {
		fd = prog.FD()
	}
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex,
			Parent:    parent,
			Handle:    legacyHandle,
			Protocol:  unix.ETH_P_ALL,
			Priority:  legacyPriority,
		},
		Fd:           fd,
		Name:         name,
		DirectAction: true,
	}
}

func attachLegacy(a *attachment, p *Programs) error {
	a.legacy = true
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: a.iface.Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscAdd(qdisc); err == nil {
		a.addedQdisc = true
	} else if !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add clsact qdisc: %w", err)
	} else {
		a.addedQdisc = a.adoptQdisc
	}
	ingress, egress := a.pair(p)
	for _, f := range []*netlink.BpfFilter{
		legacyFilter(a.iface.Index, netlink.HANDLE_MIN_INGRESS, ingress),
		legacyFilter(a.iface.Index, netlink.HANDLE_MIN_EGRESS, egress),
	} {
		if err := netlink.FilterReplace(f); err != nil {
			detachLegacy(a)
			return fmt.Errorf("add cls_bpf filter: %w", err)
		}
	}
	return nil
}

// detachLegacy removes our filters, and the clsact qdisc if we added it and
// nobody else's filter is left on it. Runs inside the interface's netns.
func detachLegacy(a *attachment) error {
	var errs []error
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		f := legacyFilter(a.iface.Index, parent, nil)
		if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete filter: %w", err))
		}
	}
	if a.addedQdisc {
		l, err := netlink.LinkByIndex(a.iface.Index)
		if err == nil && noFilters(l) {
			if err := delClsact(a.iface.Index); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeStale deletes the link's cls_bpf filters named as flowlens names
// its own, on both clsact hooks: those an earlier agent left when it was
// killed (a filter outlives its process: it holds the program, and the
// program that agent's maps, so it goes on counting into maps nobody reads).
// It returns how many it removed and whether other filters are left on
// the hooks. An interface without a clsact qdisc has none. Runs inside the
// interface's netns.
func removeStale(l netlink.Link) (removed int, others bool) {
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			continue // no clsact qdisc: no filter
		}
		for _, f := range fs {
			if !isFlowlensFilter(f) && !isBesideFilter(f) { // a capture's too (beside.go)
				others = true
				continue
			}
			if err := netlink.FilterDel(f); err == nil || errors.Is(err, unix.ENOENT) {
				removed++
			} else {
				others = true // kept: it is not ours to adopt the qdisc
			}
		}
	}
	return removed, others
}

// isFlowlensFilter says whether a listed filter is one of flowlens's.
func isFlowlensFilter(f netlink.Filter) bool {
	b, ok := f.(*netlink.BpfFilter)
	return ok && (b.Name == legacyNameIngress || b.Name == legacyNameEgress)
}

// LegacyFilters counts flowlens's cls_bpf filters on an interface of the
// current network namespace, on each hook (tests and the chaos suite: one
// set of flowlens programs per interface).
func LegacyFilters(ifindex int) (ingress, egress int, err error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, 0, err
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			continue
		}
		for _, f := range fs {
			if isFlowlensFilter(f) {
				if parent == netlink.HANDLE_MIN_INGRESS {
					ingress++
				} else {
					egress++
				}
			}
		}
	}
	return ingress, egress, nil
}

// delClsact deletes the interface's clsact qdisc (gone already: no error).
func delClsact(ifindex int) error {
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscDel(qdisc); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete clsact qdisc: %w", err)
	}
	return nil
}

func noFilters(l netlink.Link) bool {
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil || len(fs) > 0 {
			return false
		}
	}
	return true
}

// Detach removes the interface's hooks. An interface that has gone away
// (its hooks went with it) detaches without error.
func (d *Datapath) Detach(iface ifaces.Interface) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := attachKey{iface.NetnsCookie, iface.Index}
	a, ok := d.attached[key]
	if !ok {
		return nil
	}
	delete(d.attached, key)
	err := d.detach(a)
	d.flowRulesDetach(iface)
	d.release(key.netns)
	return err
}

func (d *Datapath) detach(a *attachment) error {
	var errs []error
	for _, l := range a.links {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if a.legacy {
		err := ifaces.InNetns(a.iface.NetnsPath, func() error { return detachLegacy(a) })
		if err != nil && !errors.Is(err, unix.ENOENT) { // ENOENT: the namespace is gone, and our filters with it
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detach from %s (netns %s): %w", a.iface.Name, a.iface.Netns, err)
	}
	return nil
}

// AttachMode says how the interface is attached: "tcx" (tcx links), "clsact"
// (clsact qdisc and cls_bpf filters, on kernels without tcx or with
// ForceLegacyTC), or "" when it is not attached.
func (d *Datapath) AttachMode(iface ifaces.Interface) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.attached[attachKey{iface.NetnsCookie, iface.Index}]
	switch {
	case !ok:
		return ""
	case a.legacy:
		return "clsact"
	}
	return "tcx"
}

// Attached returns how many interfaces are attached.
func (d *Datapath) Attached() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.attached)
}

// DetachAll detaches every interface.
func (d *Datapath) DetachAll() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for k, a := range d.attached {
		if err := d.detach(a); err != nil {
			errs = append(errs, err)
		}
		delete(d.attached, k)
		d.release(k.netns)
	}
	return errors.Join(errs...)
}
