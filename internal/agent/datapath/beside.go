package datapath

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
)

// A program "beside" the flow programs is one that runs on the same hook,
// right after them, for a while: the packet capture's (internal/agent/
// capture). It attaches with the interface's own mode: a tcx link anchored
// after the flow program's link, or, on clsact, a cls_bpf filter of its own
// priority after flowlens's (legacyPriority). Either way the flow programs
// run first and their counts are unchanged; the program beside them must
// return TC_ACT_UNSPEC (TCX_NEXT) so that it never decides a packet's fate.

// BesideFilterName names the cls_bpf filters of programs beside the flow
// programs; an agent starting removes those an earlier agent left
// (removeStale), as it does its flow filters.
const BesideFilterName = "flowlens_capture"

// besideHandle is the handle of those filters; their priority is
// BesidePriority + the caller's slot, so that several run side by side.
const besideHandle = 0xf10f

// BesidePriority is the cls_bpf priority of the first program beside the
// flow programs (slot 0); flowlens's own filters have priority 1.
const BesidePriority = legacyPriority + 1

// AttachedInterface is an interface the flow programs are attached to.
type AttachedInterface struct {
	ifaces.Interface
	// L3: the device has no Ethernet header (its frames start at the IP header).
	L3 bool
}

// AttachedInterfaces lists the interfaces the flow programs are attached to.
func (d *Datapath) AttachedInterfaces() []AttachedInterface {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]AttachedInterface, 0, len(d.attached))
	for _, a := range d.attached {
		out = append(out, AttachedInterface{Interface: a.iface, L3: a.l3})
	}
	return out
}

// attachWatchers are the OnAttach callbacks.
type attachWatchers struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(AttachedInterface)
}

// OnAttach calls fn with each interface the flow programs attach to from
// now on, until stop is called: a capture hooks the interfaces that appear
// while it runs. fn runs on the attaching goroutine, after the attach and
// without the datapath's lock (it may AttachBeside), once per interface;
// after stop returns it is not called again.
func (d *Datapath) OnAttach(fn func(AttachedInterface)) (stop func()) {
	w := &d.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(AttachedInterface){}
	}
	id := w.next
	w.next++
	w.fns[id] = fn
	return func() {
		w.mu.Lock()
		delete(w.fns, id)
		w.mu.Unlock()
	}
}

// notify calls the callbacks under w.mu, so that stop waits for a call in
// progress: after it, none runs.
func (w *attachWatchers) notify(it AttachedInterface) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fn := range w.fns {
		fn(it)
	}
}

// Beside is one program attached beside the flow programs; Close detaches it.
type Beside struct {
	iface  ifaces.Interface
	link   link.Link          // tcx
	filter *netlink.BpfFilter // clsact
}

// AttachBeside attaches prog to the ingress (egress false) or egress hook of
// an interface the flow programs are attached to, after them. slot (0 to 15)
// tells apart the cls_bpf filters of programs attached at the same time.
func (d *Datapath) AttachBeside(iface ifaces.Interface, egress bool, prog *ebpf.Program, slot int) (*Beside, error) {
	if slot < 0 || slot > 15 {
		return nil, fmt.Errorf("attach beside: slot %d out of 0..15", slot)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.attached[attachKey{iface.NetnsCookie, iface.Index}]
	if !ok {
		return nil, fmt.Errorf("attach beside %s (netns %s): the flow programs are not attached there", iface.Name, iface.Netns)
	}
	b := &Beside{iface: iface}
	err := ifaces.InNetns(iface.NetnsPath, func() error {
		if !a.legacy {
			typ, anchor := ebpf.AttachTCXIngress, a.links[0]
			if egress {
				typ, anchor = ebpf.AttachTCXEgress, a.links[1]
			}
			l, err := link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: prog, Attach: typ, Anchor: link.AfterLink(anchor)})
			b.link = l
			return err
		}
		parent := uint32(netlink.HANDLE_MIN_INGRESS)
		if egress {
			parent = netlink.HANDLE_MIN_EGRESS
		}
		b.filter = &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: iface.Index, Parent: parent, Handle: besideHandle,
				Protocol: unix.ETH_P_ALL, Priority: uint16(BesidePriority + slot)},
			Fd: prog.FD(), Name: BesideFilterName, DirectAction: true,
		}
		return netlink.FilterReplace(b.filter)
	})
	if err != nil {
		return nil, fmt.Errorf("attach beside %s (netns %s): %w", iface.Name, iface.Netns, err)
	}
	return b, nil
}

// Close detaches the program. An interface or namespace that has gone
// away took the program with it: no error.
func (b *Beside) Close() error {
	if b.link != nil {
		return b.link.Close()
	}
	f := *b.filter
	f.Fd = -1
	err := ifaces.InNetns(b.iface.NetnsPath, func() error { return netlink.FilterDel(&f) })
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("detach beside %s (netns %s): %w", b.iface.Name, b.iface.Netns, err)
	}
	return nil
}

// BesideFilters counts the cls_bpf filters of programs beside the flow
// programs on an interface of the current network namespace (tests: a
// capture's filters are gone when it ends).
func BesideFilters(ifindex int) (int, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			continue
		}
		for _, f := range fs {
			if isBesideFilter(f) {
				n++
			}
		}
	}
	return n, nil
}

func isBesideFilter(f netlink.Filter) bool {
	b, ok := f.(*netlink.BpfFilter)
	return ok && b.Name == BesideFilterName
}
