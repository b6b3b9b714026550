package main

// The packet capture program (issue #32, bpf/capture.c): its cost per
// packet while a capture runs, on a packet the capture's filter matches
// (parsed, counted, copied through the ring buffer: the packet's bytes
// to the CPU's scratch value, then the record to the ring, which wakes
// its reader only at a watermark) and on one it does not
// (parsed, no copy). It is a separate program attached beside the flow
// programs only while a capture runs, so with no capture running it costs
// nothing and every other case is unchanged; these rows are what one
// capture adds on each hook it is attached to.
//
// IPv4, the bench's TCP ACK frame (86 bytes), snaplen 128 (the default
// --capture-max-snaplen: the whole frame is copied); filter: source
// 10.0.0.0/8, TCP, destination port 80 (match) or 81 (other). The ring
// (8 MiB, one for all CPUs) is read empty after each repetition, outside the timing,
// so no run finds it full; the check counts every match copied.
//
// pair and pair-other (--ip with --peer-ip): filter 10.100.0.1/32 (the
// frame's destination) with peer 10.0.0.0/8 (its source), TCP,
// destination port 80: the pair matched the costlier way (its first
// conjunct, src in the first side, fails); pair-other: first side
// 10.200.0.0/16, neither end in it (refused after the two passes over it
// that a filter without a peer makes too).

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/agent/datapath"
)

type captureRow struct {
	row
	Case  string `json:"case"` // "match", "other", "pair" or "pair-other"
	Check string `json:"check"`
}

const captureRing = 8 << 20

func captureFilter(name string) capture.Filter {
	pfx := netip.MustParsePrefix
	switch name {
	case "pair":
		return capture.Filter{CIDRs: []netip.Prefix{pfx("10.100.0.1/32")}, PeerCIDRs: []netip.Prefix{pfx("10.0.0.0/8")}, Protocols: []uint8{6}, DstPorts: []uint16{80}}
	case "pair-other":
		return capture.Filter{CIDRs: []netip.Prefix{pfx("10.200.0.0/16")}, PeerCIDRs: []netip.Prefix{pfx("10.0.0.0/8")}, Protocols: []uint8{6}, DstPorts: []uint16{80}}
	}
	dport := uint16(80)
	if name == "other" {
		dport = 81
	}
	return capture.Filter{SrcCIDRs: []netip.Prefix{pfx("10.0.0.0/8")}, Protocols: []uint8{6}, DstPorts: []uint16{dport}}
}

// captureMatches says whether case name's packet matches its filter.
func captureMatches(name string) bool { return name == "match" || name == "pair" }

func runCapture(o options, cases []string) ([]captureRow, error) {
	var noop datapath.NoopObjects
	if err := datapath.LoadNoopObjects(&noop, nil); err != nil {
		return nil, err
	}
	defer noop.Close()
	pkt := packet("ipv4")
	var rows []captureRow
	for _, c := range cases {
		r, err := runCaptureCase(o, c, noop.Noop, pkt, captureFilter(c))
		if err != nil {
			return nil, fmt.Errorf("capture %s: %w", c, err)
		}
		rows = append(rows, r)
		fmt.Fprintf(os.Stderr, "  ipv4  capture %-10s %7.2f ns/pkt  floor %6.2f  net %6.2f\n", c, r.Prog.Median, r.Floor.Median, r.Net)
	}
	return rows, nil
}

func runCaptureCase(o options, name string, floor *ebpf.Program, pkt []byte, f capture.Filter) (captureRow, error) {
	// Runs per repetition: what the ring holds with room to spare.
	runs := min(o.existRuns, 20000)
	r := captureRow{row: row{Family: "ipv4", Path: "exist-hot", Flows: 1, Features: "capture", Reps: o.reps, Runs: runs,
		Note: "the capture program alone; snaplen 128"}, Case: name}
	in, err := capture.LoadInstance(f, 128, captureRing)
	if err != nil {
		return r, err
	}
	defer in.Close()
	var rec ringbuf.Record
	read := uint64(0)
	drain := func() error {
		in.Ring.SetDeadline(time.Now())
		for {
			err := in.Ring.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err != nil {
				return err
			}
			read++
		}
	}
	var cs caseSamples
	total := 0
	for attempt := 0; ; attempt++ {
		probe.waitOff(2 * time.Minute)
		cs, err = measureCase(floor, in.Prog, pkt, runs, o.reps, drain, nil, 0)
		total += o.reps * runs
		if err != nil {
			return r, err
		}
		if st := probe.on(); !st || attempt == 2 {
			r.StatsOn = st
			break
		}
	}
	matched, full, err := in.Counts()
	if err != nil {
		return r, err
	}
	want := uint64(0)
	if captureMatches(name) {
		want = uint64(total)
	}
	if matched != want || full != 0 || read != want {
		return r, fmt.Errorf("matched %d, ring full %d, read %d; want %d, 0, %d", matched, full, read, want, want)
	}
	r.Check = fmt.Sprintf("%d runs: %d matched and copied, ring full 0", total, matched)
	r.Prog, r.Floor = summarize(cs.pu, cs.pk), summarize(cs.fu, cs.fk)
	r.Ratio = median(cs.ratios)
	r.Net = r.Prog.Median - r.Floor.Median
	return r, nil
}

func parseCapture(s string) ([]string, error) {
	if s == "none" || s == "" {
		return nil, nil
	}
	cases := strings.Split(s, ",")
	for _, c := range cases {
		if c != "match" && c != "other" && c != "pair" && c != "pair-other" {
			return nil, fmt.Errorf("bad -capture entry %q (match, other, pair, pair-other or none)", c)
		}
	}
	return cases, nil
}

func printCapture(rows []captureRow) {
	fmt.Println("Packet capture (issue #32): the capture program, which runs beside the flow programs only while")
	fmt.Println("a capture runs (no capture: not loaded, 0 ns). IPv4, snaplen 128; match: copied through the ring.")
	fmt.Println()
	fmt.Printf("%-10s | %8s %17s | %8s | %6s | %7s\n", "case", "ns", "min..max", "floor ns", "×floor", "net ns")
	fmt.Println(strings.Repeat("-", 70))
	for _, r := range rows {
		mark := ""
		if r.StatsOn {
			mark = " *"
		}
		fmt.Printf("%-10s | %8.2f %17s | %8.2f | %6.2f | %7.2f%s\n", r.Case, r.Prog.Median,
			fmt.Sprintf("%.2f..%.2f", r.Prog.Min, r.Prog.Max), r.Floor.Median, r.Ratio, r.Net, mark)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("checked, capture %s: %s\n", r.Case, r.Check)
	}
	fmt.Println()
}
