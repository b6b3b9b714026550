package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// capThirdIP is a third address, on the server's side of the capture lab.
const capThirdIP = "10.177.45.3"

// --peer-ip with --ip (or with a name, --pod) captures the packets between
// the two sides, both ways, and no other: traffic among three addresses
// (A the client pod, B the server pod, C a third address beside B, so
// that A's traffic with C crosses the same veth), sent interleaved A→B,
// A→C, B→A, C→A, 20 of each; a capture of --ip A --peer-ip B (ingress:
// each datagram once, entering its receiver's namespace) bounded at 40
// packets gets exactly the 20 A→B on cap-sv0 and the 20 B→A on cap-cl0,
// none of A's with C (--ip A alone matches them: had they matched, they
// would have taken some of the 40). The same with --pod shop/client-1
// for A.
func TestCapturePeer(t *testing.T) {
	l := startCaptureLab(t)
	netlab.AddAddr(t, l.sv, "cap-sv0", capThirdIP+"/24")
	for _, x := range []struct {
		ns   *netlab.Netns
		addr string
	}{{l.sv, capServerIP + ":7001"}, {l.cl, capClientIP + ":7001"}, {l.sv, capThirdIP + ":7001"}} {
		c, err := netlab.UDPListen(x.ns, x.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for _, tc := range []struct{ name, flag, value string }{
		{"ip", "--ip", capClientIP},
		{"pod", "--pod", "shop/client-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "peer.pcapng")
			r := l.capture("-w", file, tc.flag, tc.value, "--peer-ip", capServerIP, "--protocol", "udp", "--direction", "ingress",
				"--max-packets", "40", "--duration", "5m")
			l.waitRunning(t, 1, "capture started")
			send := func(ns *netlab.Netns, src, dst string) {
				if err := netlab.UDPSend(ns, src+":5001", dst+":7001", make([]byte, 100), 1); err != nil {
					t.Fatal(err)
				}
			}
			for range 20 {
				send(l.cl, capClientIP, capServerIP)
				send(l.cl, capClientIP, capThirdIP)
				send(l.sv, capServerIP, capClientIP)
				send(l.sv, capThirdIP, capClientIP)
			}
			code, out, errOut := r.wait(t)
			if code != 0 || out != "" || errOut != "40 packets captured\ncapture ended: --max-packets reached\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			seen := map[string]int{}
			for _, row := range tshark(t, file, "frame.interface_name", "ip.src", "ip.dst", "udp.srcport", "udp.dstport") {
				seen[strings.Join(row, " ")]++
			}
			want := map[string]int{
				fmt.Sprintf("cap-sv0 %s %s 5001 7001", capClientIP, capServerIP): 20,
				fmt.Sprintf("cap-cl0 %s %s 5001 7001", capServerIP, capClientIP): 20,
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("tshark read %v, want %v", seen, want)
			}
			l.waitRunning(t, 0, "capture ended")
		})
	}
}
