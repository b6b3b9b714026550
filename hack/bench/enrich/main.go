// Command bench-enrich measures the enrichment hooks' cost per run on real
// traffic: an iperf3 TCP transfer between two network namespaces over a veth
// pair with random loss (nftables) at the receiver (received segments run
// rtt_tcp_probe, lost ones drop_kfree_skb, their resends retransmit), and UDP
// to a closed port (drop_kfree_skb, NO_SOCKET). Each run loads the
// tp_btf programs of an enrichment object, attaches them, and reads the
// kernel's run_time_ns / run_cnt (BPF_ENABLE_STATS) afterwards.
//
// Several objects given with -obj are measured in alternation, so drift of
// the machine hits them alike; it prints each run and the medians. Root only;
// needs iperf3, ip and nft. It deletes its namespaces on exit.
//
//	go run ./hack/bench/enrich -obj old.o,internal/agent/datapath/datapath_bpfel.o -runs 7
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

var progs = []string{"rtt_tcp_probe", "drop_kfree_skb", "retransmit"}

// nsA and nsB are the sender's and the receiver's namespaces (names under
// /var/run/netns, for ip netns exec); lab built them and tears them down.
var (
	nsA, nsB string
	lab      *netlab.Script
)

// fatalf deletes the namespaces, then exits (log.Fatal would skip defers).
func fatalf(format string, args ...any) {
	teardown()
	log.Fatalf(format, args...)
}

func main() {
	objs := flag.String("obj", "internal/agent/datapath/datapath_bpfel.o", "comma-separated enrichment objects to compare")
	runs := flag.Int("runs", 5, "runs per object")
	secs := flag.Int("secs", 4, "seconds of traffic per run")
	loss := flag.Int("loss", 10, "per mille of the data segments dropped (nftables on the receiver)")
	udpTo := flag.String("udp-to", "", "internal: send UDP to this address for -secs and exit")
	flag.Parse()
	log.SetFlags(0)
	if *udpTo != "" {
		udpFlood(*udpTo, *secs)
		return
	}

	defer teardown()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, unix.SIGTERM)
	go func() { <-sig; fatalf("interrupted") }()
	setup(*loss)

	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		fatalf("enable stats: %v", err)
	}
	defer stats.Close()

	paths := strings.Split(*objs, ",")
	nsPerRun := map[string]map[string][]float64{} // obj -> prog -> ns/run of each run
	for _, p := range paths {
		nsPerRun[p] = map[string][]float64{}
		printFigures(p)
	}
	for r := range *runs {
		for _, p := range paths {
			res, lost := measure(p, *secs)
			fmt.Printf("run %d %s:", r, p)
			for _, name := range progs {
				s := res[name]
				if s.RunCount == 0 {
					fmt.Printf("  %s -", name)
					continue
				}
				v := float64(s.Runtime.Nanoseconds()) / float64(s.RunCount)
				nsPerRun[p][name] = append(nsPerRun[p][name], v)
				fmt.Printf("  %s %.0f ns × %d", name, v, s.RunCount)
			}
			fmt.Printf("  lost=%s\n", lost)
		}
	}
	fmt.Println("medians, ns per run:")
	for _, p := range paths {
		fmt.Printf("  %s:", p)
		for _, name := range progs {
			fmt.Printf("  %s %.0f", name, median(nsPerRun[p][name]))
		}
		fmt.Println()
	}
}

func sh(args ...string) {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		fatalf("%v: %v\n%s", args, err, out)
	}
}

// setup builds the two namespaces with netlab (internal/testkit/netlab),
// the kernel tests' lab builder: a veth flb0 (10.99.0.1) – flb1
// (10.99.0.2), and the random loss on the receiver.
func setup(lossPerMille int) {
	lab = &netlab.Script{}
	err := lab.Build(func(t netlab.T) {
		a, b := netlab.NewNetns(t, "bench-enrich-a"), netlab.NewNetns(t, "bench-enrich-b")
		nsA, nsB = a.Name, b.Name
		netlab.Veth(t, a, "flb0", b, "flb1")
		netlab.AddAddr(t, a, "flb0", "10.99.0.1/24")
		netlab.AddAddr(t, b, "flb1", "10.99.0.2/24")
		netlab.Run(t, b, "nft", "add table inet flb; add chain inet flb in { type filter hook input priority 0; }; "+
			"add rule inet flb in tcp dport 5201 numgen random mod 1000 < "+fmt.Sprint(lossPerMille)+" drop")
	})
	if err != nil {
		fatalf("lab: %v", err)
	}
}

func teardown() {
	if lab == nil { // the UDP sender child built none
		return
	}
	if err := lab.Close(); err != nil {
		log.Print("lab teardown: ", err)
	}
	lab = nil
}

// measure loads and attaches the programs of obj, runs the traffic, and
// returns each program's stats and the enrich_counters sum when present.
func measure(obj string, secs int) (map[string]*ebpf.ProgramStats, string) {
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		fatalf("%v", err)
	}
	for name := range spec.Programs {
		if !slices.Contains(progs, name) {
			delete(spec.Programs, name)
		}
	}
	spec.Maps["enrich_a"].MaxEntries = 65536
	spec.Maps["enrich_b"].MaxEntries = 65536
	if k, err := btf.LoadKernelSpec(); err == nil {
		var e *btf.Enum
		if k.TypeByName("skb_drop_reason", &e) == nil {
			for _, v := range e.Values {
				switch v.Name {
				case "SKB_CONSUMED":
					_ = spec.Variables["reason_consumed"].Set(uint32(v.Value))
				case "SKB_DROP_REASON_NOT_SPECIFIED":
					_ = spec.Variables["reason_not_specified"].Set(uint32(v.Value))
				}
			}
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		fatalf("%s: %v", obj, err)
	}
	defer coll.Close()
	for _, name := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[name]})
		if err != nil {
			fatalf("attach %s: %v", name, err)
		}
		defer l.Close()
	}

	// A TCP transfer with loss, and UDP to a closed port (NO_SOCKET drops)
	// sent by this program re-run in the sender's namespace.
	var bg []*exec.Cmd
	for _, c := range [][]string{
		{nsB, "iperf3", "-s", "-1", "-p", "5201"},
		{nsA, os.Args[0], "-udp-to", "10.99.0.2:9999", "-secs", fmt.Sprint(secs)},
	} {
		cmd := exec.Command("ip", append([]string{"netns", "exec"}, c...)...)
		cmd.Stdout = io.Discard
		if err := cmd.Start(); err != nil {
			fatalf("%v", err)
		}
		bg = append(bg, cmd)
		time.Sleep(200 * time.Millisecond)
	}
	sh("ip", "netns", "exec", nsA, "iperf3", "-c", "10.99.0.2", "-p", "5201", "-t", fmt.Sprint(secs))
	for _, cmd := range bg {
		cmd.Wait()
	}

	out := map[string]*ebpf.ProgramStats{}
	for _, name := range progs {
		s, err := coll.Programs[name].Stats()
		if err != nil {
			fatalf("%v", err)
		}
		out[name] = s
	}
	lost := "n/a"
	if m := coll.Maps["enrich_counters"]; m != nil {
		var percpu []uint64
		if err := m.Lookup(uint32(0), &percpu); err == nil {
			var sum uint64
			for _, v := range percpu {
				sum += v
			}
			lost = fmt.Sprint(sum)
		}
	}
	return out, lost
}

// printFigures loads each program alone, as TestBudget does, and prints
// its instruction counts.
func printFigures(obj string) {
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		fatalf("%v", err)
	}
	fmt.Println(obj + ": elf_insns / verified_insns / xlated_bytes / jited_bytes")
	for _, name := range slices.Sorted(maps.Keys(spec.Programs)) {
		one := spec.Copy()
		for other := range one.Programs {
			if other != name {
				delete(one.Programs, other)
			}
		}
		coll, err := ebpf.NewCollection(one)
		if err != nil {
			fmt.Printf("  %-16s does not load: %.80v\n", name, err)
			continue
		}
		info, _ := coll.Programs[name].Info()
		v, _ := info.VerifiedInstructions()
		x, _ := info.TranslatedSize()
		j, _ := info.JitedSize()
		fmt.Printf("  %-16s %d / %d / %d / %d\n", name, len(spec.Programs[name].Instructions), v, x, j)
		coll.Close()
	}
}

// udpFlood sends 1000-byte datagrams to addr, about 20 000 per second.
func udpFlood(addr string, secs int) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		fatalf("%v", err)
	}
	buf := make([]byte, 1000)
	for end := time.Now().Add(time.Duration(secs) * time.Second); time.Now().Before(end); {
		for range 20 {
			c.Write(buf) // ECONNREFUSED from the previous ICMP error is expected
		}
		time.Sleep(time.Millisecond)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
