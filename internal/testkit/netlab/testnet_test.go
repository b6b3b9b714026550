package netlab

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// pair builds two quiet namespaces joined by veth "a0" (10.9.0.1) <-> "b0"
// (10.9.0.2), with static neighbours so no ARP exchange is ever needed.
func pair(t *testing.T, dir string) (a, b *Netns) {
	a, b = NewNetnsIn(t, dir, "a"), NewNetnsIn(t, dir, "b")
	Quiet(t, a)
	Quiet(t, b)
	la, lb := Veth(t, a, "a0", b, "b0")
	AddAddr(t, a, "a0", "10.9.0.1/24")
	AddAddr(t, b, "b0", "10.9.0.2/24")
	Neigh(t, a, "a0", "10.9.0.2", lb.Attrs().HardwareAddr)
	Neigh(t, b, "b0", "10.9.0.1", la.Attrs().HardwareAddr)
	return a, b
}

func TestUDPAcrossVethCountsExactly(t *testing.T) {
	Require(t)
	a, b := pair(t, DefaultDir)

	conn, err := UDPListen(b, "10.9.0.2:9000")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rx0, rxB0, _, _ := LinkStats(b, "b0")
	_, _, tx0, _ := LinkStats(a, "a0")
	payload := []byte("hello-flowlens")
	if err := UDPSend(a, "10.9.0.1:9001", "10.9.0.2:9000", payload, 5); err != nil {
		t.Fatal(err)
	}

	buf := make([]byte, 1500)
	for i := 0; i < 5; i++ {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], payload) || from.String() != "10.9.0.1:9001" {
			t.Fatalf("datagram %d: %q from %s", i, buf[:n], from)
		}
	}

	rx1, rxB1, _, _ := LinkStats(b, "b0")
	_, _, tx1, _ := LinkStats(a, "a0")
	if rx1-rx0 != 5 || tx1-tx0 != 5 {
		t.Fatalf("b0 rx moved by %d packets, a0 tx by %d; want 5 and 5", rx1-rx0, tx1-tx0)
	}
	// 14 ethernet + 20 IPv4 + 8 UDP header bytes per datagram.
	if want := uint64(5 * (14 + 20 + 8 + len(payload))); rxB1-rxB0 != want {
		t.Fatalf("b0 rx moved by %d bytes, want %d", rxB1-rxB0, want)
	}
}

func TestQuietNamespaceStaysSilent(t *testing.T) {
	Require(t)
	a, _ := pair(t, DefaultDir)
	time.Sleep(300 * time.Millisecond)
	_, _, tx0, _ := LinkStats(a, "a0")
	time.Sleep(1200 * time.Millisecond)
	_, _, tx1, _ := LinkStats(a, "a0")
	if tx1 != tx0 || tx0 != 0 {
		t.Fatalf("a0 sent packets by itself: %d then %d", tx0, tx1)
	}
}

func TestQuietIPv6SendsNoDADOrRS(t *testing.T) {
	Require(t)
	a, b := NewNetns(t, "a6"), NewNetns(t, "b6")
	QuietIPv6(t, a)
	QuietIPv6(t, b)
	Veth(t, a, "a0", b, "b0")
	// Link-local addresses are usable almost at once: without DAD the
	// kernel's addrconf work clears "tentative" as soon as it runs (a
	// workqueue: under load not before this test looks, CI caught it),
	// while one DAD probe would hold it for a whole second.
	var out []byte
	for deadline := time.Now().Add(300 * time.Millisecond); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if out, err = RunIn(a, "ip", "-6", "addr", "show", "dev", "a0"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if strings.Contains(string(out), "fe80::") && !strings.Contains(string(out), "tentative") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want a usable link-local address within 300 ms:\n%s", out)
		}
	}
	// Let the one-off MLD reports go out, then nothing more may follow: by
	// default a router solicitation comes within rtr_solicit_delay (1s) of
	// the address being ready, and MLD retransmits within 1s.
	time.Sleep(500 * time.Millisecond)
	_, _, tx0, _ := LinkStats(a, "a0")
	time.Sleep(2 * time.Second)
	_, _, tx1, _ := LinkStats(a, "a0")
	t.Logf("a0 sent %d packets on link up (MLD reports)", tx0)
	if tx1 != tx0 {
		t.Fatalf("a0 kept sending: %d then %d packets", tx0, tx1)
	}
}

func TestRunInUsesTheNamespace(t *testing.T) {
	Require(t)
	ns := NewNetnsIn(t, t.TempDir(), "run")
	Bridge(t, ns, "br7")
	out, err := RunIn(ns, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "br7") || strings.Count(string(out), "\n") != 2 {
		t.Fatalf("want lo and br7 only:\n%s", out)
	}
}

func TestBridgeAndMaster(t *testing.T) {
	Require(t)
	a, b := NewNetns(t, "br"), NewNetns(t, "peer")
	br := Bridge(t, a, "br0")
	Veth(t, a, "p0", b, "q0")
	SetMaster(t, a, "p0", "br0")
	h, err := Handle(a)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p0, err := h.LinkByName("p0")
	if err != nil {
		t.Fatal(err)
	}
	if p0.Attrs().MasterIndex != br.Attrs().Index {
		t.Fatalf("p0 master %d, want br0 %d", p0.Attrs().MasterIndex, br.Attrs().Index)
	}
}

// TestCleanupLeavesNothing re-runs this test binary as a child whose test
// builds namespaces and links and then fails (t.Fatal, then panic), and
// checks that nothing it made is left, in the directory or in the kernel.
func TestCleanupLeavesNothing(t *testing.T) {
	Require(t)
	for _, mode := range []string{"fatal", "panic"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			hostVeth := IfName("flt")
			cmd := exec.Command(os.Args[0], "-test.run=^TestChildFails$", "-test.count=1")
			cmd.Env = append(os.Environ(), "FLTEST_CHILD="+mode, "FLTEST_DIR="+dir, "FLTEST_VETH="+hostVeth)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "intentional") {
				t.Fatalf("child should fail on purpose: %v\n%s", err, out)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("netns dir not empty: %v", entries)
			}
			if _, err := netlink.LinkByName(hostVeth); err == nil {
				t.Errorf("host veth %s survived", hostVeth)
			}
		})
	}
}

// TestChildFails is the child of TestCleanupLeavesNothing; it is skipped in
// a normal run.
func TestChildFails(t *testing.T) {
	mode := os.Getenv("FLTEST_CHILD")
	if mode == "" {
		t.Skip("helper process for TestCleanupLeavesNothing")
	}
	a, _ := pair(t, os.Getenv("FLTEST_DIR"))
	Veth(t, nil, os.Getenv("FLTEST_VETH"), a, "h0")
	if mode == "panic" {
		panic("intentional panic")
	}
	t.Fatal("intentional failure")
}

func TestCleanupOfDefaultDir(t *testing.T) {
	Require(t)
	var name string
	t.Run("create", func(t *testing.T) {
		name = NewNetns(t, "gone").Name
		if out, err := RunIn(nil, "ip", "netns", "list"); err != nil || !strings.Contains(string(out), name) {
			t.Fatalf("ip netns list does not show %s: %v %s", name, err, out)
		}
	})
	out, err := RunIn(nil, "ip", "netns", "list")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), name) {
		t.Fatalf("%s still listed:\n%s", name, out)
	}
	if _, err := os.Stat(filepath.Join(DefaultDir, name)); !os.IsNotExist(err) {
		t.Fatalf("%s still in %s", name, DefaultDir)
	}
}

func TestSweepRemovesDeadOwners(t *testing.T) {
	Require(t)
	dir := t.TempDir()
	// A namespace file named as if created by a process that no longer
	// exists (pid 0x7ffffff0 is above pid_max).
	stale := filepath.Join(dir, Prefix+"old-2147483632-abcdef")
	if err := bindNewNetns(createFile(t, stale)); err != nil {
		t.Fatal(err)
	}
	NewNetnsIn(t, dir, "new") // first use of dir sweeps it
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		unmountRemove(stale)
		t.Fatalf("stale namespace not swept (err=%v)", err)
	}
}

func createFile(t *testing.T, p string) string {
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

func TestDoRestoresThread(t *testing.T) {
	Require(t)
	ns := NewNetnsIn(t, t.TempDir(), "do")
	host, _ := os.Readlink("/proc/thread-self/ns/net")
	var inside string
	if err := ns.Do(func() (err error) {
		inside, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inside == host {
		t.Fatalf("Do ran in the host namespace %s", host)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic in fn not propagated")
			}
		}()
		ns.Do(func() error { panic("boom") })
	}()
	// Every thread the scheduler may hand us must be back in the host netns.
	for i := 0; i < 200; i++ {
		done := make(chan string)
		go func() {
			l, _ := os.Readlink("/proc/thread-self/ns/net")
			done <- l
		}()
		if got := <-done; got != host {
			t.Fatalf("a thread is left in %s (host %s)", got, host)
		}
	}
}
