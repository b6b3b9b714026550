package datapath_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// BenchmarkAttachNamespaces is what the agent pays when the interfaces of
// N new namespaces (pods) appear: attaching one interface in each (a veth
// end, like a pod's eth0), with one TC program set shared by every
// namespace and with the fallback, one set per namespace. An op attaches
// all N (then, untimed, detaches them: the fallback releases the sets, so
// every op loads them again, as pod churn does). Reported besides ns/op:
//
//   - cpu-ms/op: the process's CPU time (user + system: the verifier runs
//     in the bpf() syscall) for the N attachments;
//   - prog-KiB: kernel memory of the loaded TC programs while the N are
//     attached: memlock (the translated program) plus the JIT image, and
//     the per-set constants map (.rodata) of each set;
//   - tc-progs: how many TC program instances are loaded then.
//
// Run: go test -run '^$' -bench AttachNamespaces -benchtime 3x -count 5 ./internal/agent/datapath/
func BenchmarkAttachNamespaces(b *testing.B) {
	netlab.Require(b)
	for _, mode := range []struct {
		name  string
		force bool
	}{{"shared", false}, {"per-namespace", true}} {
		for _, n := range []int{1, 10, 50} {
			b.Run(fmt.Sprintf("%s/ns=%d", mode.name, n), func(b *testing.B) {
				benchAttach(b, n, mode.force)
			})
		}
	}
}

func benchAttach(b *testing.B, n int, force bool) {
	dp, err := datapath.Load(datapath.Config{MaxFlows: 1024, Sampling: 1, ForcePerNamespacePrograms: force})
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	if dp.SharedPrograms() == force {
		b.Fatalf("SharedPrograms() = %v with ForcePerNamespacePrograms %v", dp.SharedPrograms(), force)
	}
	its := make([]ifaces.Interface, n)
	for i := range its {
		ns := netlab.NewNetns(b, fmt.Sprintf("att%d", i))
		if out, err := netlab.RunIn(ns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "p0"); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		c, err := ifaces.NetnsCookie(ns.Path)
		if err != nil {
			b.Fatal(err)
		}
		l := link(b, ns, "eth0")
		its[i] = ifaces.Interface{Name: "eth0", Index: l.Attrs().Index, Netns: ns.Name, NetnsPath: ns.Path, NetnsCookie: c}
	}
	var cpu time.Duration
	var mem, progs int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := cpuTime(b)
		for _, it := range its {
			if err := dp.Attach(it); err != nil {
				b.Fatal(err)
			}
		}
		cpu += cpuTime(b) - c0
		b.StopTimer()
		mem, progs = tcMemory(b, dp)
		for _, it := range its {
			if err := dp.Detach(it); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(mem)/1024, "prog-KiB")
	b.ReportMetric(float64(progs), "tc-progs")
}

// cpuTime is the process's user + system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tcMemory sums what the kernel holds for the loaded TC programs: each
// program's memlock (its translated image) and JIT image, and the memlock
// of each set's own constants map (".rodata"; the other maps are the
// datapath's, shared by every set).
func tcMemory(b *testing.B, dp *datapath.Datapath) (bytes, progs int) {
	rodata := map[ebpf.MapID]bool{}
	for _, p := range dp.Programs() {
		if p.Attach != "tc_ingress" && p.Attach != "tc_egress" {
			continue
		}
		progs++
		info, err := p.Prog.Info()
		if err != nil {
			b.Fatal(err)
		}
		memlock, ok := info.Memlock()
		jited, err := info.JitedSize()
		if !ok || err != nil {
			b.Fatalf("program memlock %v, JIT size: %v", ok, err)
		}
		bytes += int(memlock) + int(jited)
		ids, _ := info.MapIDs()
		for _, id := range ids {
			if rodata[id] {
				continue
			}
			m, err := ebpf.NewMapFromID(id)
			if err != nil {
				b.Fatal(err)
			}
			mi, err := m.Info()
			m.Close()
			if err != nil {
				b.Fatal(err)
			}
			if mi.Name == ".rodata" {
				rodata[id] = true
				ml, _ := mi.Memlock()
				bytes += int(ml)
			}
		}
	}
	return bytes, progs
}
