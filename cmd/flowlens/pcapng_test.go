package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// tshark runs tshark -r file -T fields with the fields, one line per
// packet, tab-separated. Without tshark (hack/install-deps.sh test
// installs it) the test is skipped, and fails in CI.
func tshark(t *testing.T, file string, fields ...string) [][]string {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		// A reader nobody here wrote: skipped only outside CI.
		testkit.Need(t, "tshark", fmt.Errorf("%v: install it with `sudo hack/install-deps.sh test`", err))
	}
	args := []string{"-r", file, "-T", "fields", "-E", "separator=/t", "-o", "gui.column.format:\"No.\",\"%m\""}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("tshark %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l != "" {
			rows = append(rows, strings.Split(l, "\t"))
		}
	}
	return rows
}

// captureUDPFrame is an Ethernet IPv4 UDP frame with n bytes of payload.
func captureUDPFrame(src, dst string, sport, dport uint16, n int) []byte {
	return packet.Cat(packet.Eth(packet.EtherTypeIPv4),
		packet.IPv4(packet.ProtoUDP, src, dst, packet.UDPLen+n, packet.Checksum()),
		packet.UDP(sport, dport, n), packet.Payload(n))
}

// The pcapng our writer makes, read by tshark and capinfos: every packet
// with its interface block (name, description), its addresses, ports,
// wire and captured lengths, its comment, in time order across nodes, and
// raw IP packets of an interface without a layer 2 header.
func TestCapturePcapngReadByTshark(t *testing.T) {
	const snaplen = 64
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano()
	type want struct {
		iface, desc, src, dst string
		sport, dport          uint16
		wire                  int
		comment               string
	}
	var packets []*flowv1.CapturedPacket
	var wants []want
	podA := &flowv1.K8SContext{Kind: "pod", Namespace: "shop", Name: "cart-7d9f8", Workload: "cart", WorkloadKind: "Deployment"}
	podB := &flowv1.K8SContext{Kind: "pod", Namespace: "shop", Name: "db-0", Workload: "db", WorkloadKind: "StatefulSet"}
	// Node b's packets come first from their collector but are later in
	// time: the merge puts them in time order.
	for i := range 6 {
		node, iface, dir := "node-a", "veth1", flowv1.CaptureDirection_CAPTURE_DIRECTION_INGRESS
		if i%2 == 1 {
			node, iface, dir = "node-b", "eth0", flowv1.CaptureDirection_CAPTURE_DIRECTION_EGRESS
		}
		n := 100 + 37*i
		frame := captureUDPFrame("10.1.0.1", "10.2.0.2", uint16(40000+i), 5353, n)
		p := &flowv1.CapturedPacket{Node: node, Interface: iface, Ifindex: uint32(3 + i%2), Netns: "ns-" + node, Direction: dir,
			TimeUnixNano: base + int64(i)*int64(time.Millisecond) + int64(i), WireLength: uint32(len(frame)), Data: frame[:snaplen],
			LinkType: 1, SrcK8S: podA, DstK8S: podB}
		packets = append([]*flowv1.CapturedPacket{p}, packets...) // reversed
		wants = append(wants, want{iface, fmt.Sprintf("node=%s netns=ns-%s ifindex=%d direction=%s", node, node, 3+i%2, directionName(dir)),
			"10.1.0.1", "10.2.0.2", uint16(40000 + i), 5353, len(frame),
			"node=" + node + " src=pod:shop/cart-7d9f8(Deployment/cart) dst=pod:shop/db-0(StatefulSet/db)"})
	}
	// A raw IP packet (a tun interface), last.
	raw := packet.Cat(packet.IPv4(packet.ProtoUDP, "10.3.0.1", "10.3.0.2", packet.UDPLen+10, packet.Checksum()), packet.UDP(1000, 2000, 10), packet.Payload(10))
	packets = append(packets, &flowv1.CapturedPacket{Node: "node-a", Interface: "tun0", Direction: flowv1.CaptureDirection_CAPTURE_DIRECTION_INGRESS,
		TimeUnixNano: base + int64(time.Second), WireLength: uint32(len(raw)), Data: raw, LinkType: 101})
	wants = append(wants, want{"tun0", "node=node-a netns= ifindex=0 direction=ingress", "10.3.0.1", "10.3.0.2", 1000, 2000, len(raw), "node=node-a src=- dst=-"})

	file := filepath.Join(t.TempDir(), "c.pcapng")
	var buf bytes.Buffer
	sink, err := newCaptureSink(&buf, "pcapng", 0)
	if err != nil {
		t.Fatal(err)
	}
	ro := newReorder(reorderWindow, reorderMaxHeld)
	now := time.Now()
	for _, p := range packets {
		ro.push(p, now)
	}
	if err := ro.drain(sink.packet); err != nil || sink.flush() != nil || ro.late != 0 {
		t.Fatalf("drain: %v, late %d", err, ro.late)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	rows := tshark(t, file, "frame.interface_name", "frame.interface_description", "ip.src", "ip.dst", "udp.srcport", "udp.dstport",
		"frame.len", "frame.cap_len", "frame.comment", "frame.time_epoch")
	if len(rows) != len(wants) {
		t.Fatalf("tshark read %d packets, want %d: %q", len(rows), len(wants), rows)
	}
	var last string
	for i, w := range wants {
		r := rows[i]
		capLen := min(snaplen, w.wire)
		exp := []string{w.iface, w.desc, w.src, w.dst, fmt.Sprint(w.sport), fmt.Sprint(w.dport), fmt.Sprint(w.wire), fmt.Sprint(capLen), w.comment}
		if got := r[:9]; strings.Join(got, "|") != strings.Join(exp, "|") {
			t.Errorf("packet %d: tshark read\n%q, want\n%q", i, got, exp)
		}
		if r[9] < last {
			t.Errorf("packet %d: time %s before the previous %s", i, r[9], last)
		}
		last = r[9]
	}
	if want := fmt.Sprintf("%d.%09d", base/1e9, base%1e9); rows[0][9] != want {
		t.Errorf("first packet's time %s, want %s (nanosecond resolution)", rows[0][9], want)
	}
	if want := fmt.Sprintf("%d.%09d", base/1e9, 5*int64(time.Millisecond)+5); rows[5][9] != want {
		t.Errorf("sixth packet's time %s, want %s", rows[5][9], want)
	}
	out, err := exec.Command("capinfos", "-c", "-I", file).CombinedOutput()
	if err != nil {
		t.Fatalf("capinfos: %v: %s", err, out)
	}
	// Three interfaces: node-a's veth1, node-b's eth0, node-a's tun0.
	for _, s := range []string{"Number of packets:   7", "Number of interfaces in file: 3"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("capinfos says\n%s\nwant %q", out, s)
		}
	}
}
