package datapath_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// An interface where an earlier agent was killed (its cls_bpf filters
// left on a clsact qdisc: one at today's priority and handle, one at
// another, as an older version might have used, and a capture's) is
// attached with exactly one set of flowlens programs, tcx or clsact: the
// earlier filters are removed (by name), a filter of someone else stays,
// and the clsact qdisc, when only the earlier agent used it, is removed (at
// once with tcx, at detach with clsact).
func TestAttachRemovesStaleFilters(t *testing.T) {
	netlab.Require(t)
	for _, mode := range []struct {
		name   string
		legacy bool
	}{{"tcx", false}, {"clsact", true}} {
		for _, foreign := range []bool{false, true} {
			name := mode.name
			if foreign {
				name += "+foreign"
			}
			t.Run(name, func(t *testing.T) { testStaleFilters(t, mode.legacy, foreign) })
		}
	}
}

func testStaleFilters(t *testing.T, legacy, foreign bool) {
	a, b := netlab.NewNetns(t, "stale"), netlab.NewNetns(t, "stale")
	la, _ := netlab.Veth(t, a, "s0", b, "s1")
	idx := la.Attrs().Index
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	// What the killed agent left: a clsact qdisc and its filters.
	h, err := netlab.Handle(a)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.QdiscAdd(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx,
		Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}); err != nil {
		t.Fatal(err)
	}
	plant := func(parent uint32, prio uint16, handle uint32, name string) {
		if err := h.FilterAdd(&netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: parent,
			Handle: handle, Protocol: unix.ETH_P_ALL, Priority: prio}, Fd: prog.FD(), Name: name, DirectAction: true}); err != nil {
			t.Fatalf("filter %s: %v", name, err)
		}
	}
	plant(netlink.HANDLE_MIN_INGRESS, 1, 0xf10e, "flowlens_ingress")
	plant(netlink.HANDLE_MIN_EGRESS, 7, 1, "flowlens_egress")
	plant(netlink.HANDLE_MIN_EGRESS, datapath.BesidePriority, 0xf10f, datapath.BesideFilterName) // a capture's
	if foreign {
		plant(netlink.HANDLE_MIN_INGRESS, 9, 2, "someone_else")
	}

	var log bytes.Buffer
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1, ForceLegacyTC: legacy,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	c, err := ifaces.NetnsCookie(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	it := ifaces.Interface{Name: "s0", Index: idx, Netns: a.Name, NetnsPath: a.Path, NetnsCookie: c}
	if err := dp.Attach(it); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "removed the filters an earlier flowlens agent left") || !strings.Contains(log.String(), "filters=3") {
		t.Errorf("no log line for the 3 filters removed:\n%s", log.String())
	}
	want := 0
	if legacy {
		want = 1
	}
	filters := func() (in, eg, others int, qdisc bool) {
		err := a.Do(func() error {
			var err error
			if in, eg, err = datapath.LegacyFilters(idx); err != nil {
				return err
			}
			l, err := netlink.LinkByIndex(idx)
			if err != nil {
				return err
			}
			fs, _ := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS)
			for _, f := range fs {
				if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == "someone_else" {
					others++
				}
			}
			qs, err := netlink.QdiscList(l)
			for _, q := range qs {
				qdisc = qdisc || q.Type() == "clsact"
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	in, eg, others, qdisc := filters()
	if err := a.Do(func() error {
		n, err := datapath.BesideFilters(idx)
		if err == nil && n != 0 {
			t.Errorf("a capture's filter left by the earlier agent: %d left, want 0", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if in != want || eg != want || others != btoi(foreign) {
		t.Errorf("attached (%s): flowlens filters ingress %d egress %d, foreign %d; want %d %d %d",
			dp.AttachMode(it), in, eg, others, want, want, btoi(foreign))
	}
	if !legacy && qdisc != foreign {
		t.Errorf("tcx: clsact qdisc present %v, want %v (only with the foreign filter)", qdisc, foreign)
	}
	if err := dp.Detach(it); err != nil {
		t.Fatal(err)
	}
	in, eg, others, qdisc = filters()
	if in != 0 || eg != 0 || others != btoi(foreign) || qdisc != foreign {
		t.Errorf("detached: flowlens filters %d %d, foreign %d, clsact qdisc %v; want 0 0 %d %v",
			in, eg, others, qdisc, btoi(foreign), foreign)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
