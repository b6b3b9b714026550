package ifaces_test

import (
	"encoding/binary"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	tcx "github.com/cilium/ebpf/link"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// TestNetnsCookieVersusTCHelper pins down what bpf_get_netns_cookie(skb)
// returns in a tc program, against NetnsCookie. The helper reports the
// namespace of the socket the packet carries (skb->sk), or the initial
// namespace's cookie when it carries none; never the device's namespace as
// such. A veth crossing keeps skb->sk, so a packet sent by a socket in a
// and seen at ingress of b0 in namespace b reports a's cookie; an ARP
// request (no socket) reports the initial namespace. Hence the datapath must
// not use the helper as interface identity: it reads the device's
// namespace's net_cookie, which is what NetnsCookie reports (the datapath's
// TestSameIfindexFourNamespaces compares them).
func TestNetnsCookieVersusTCHelper(t *testing.T) {
	netlab.Require(t)
	a, b := netlab.NewNetns(t, "bpfa"), netlab.NewNetns(t, "bpfb")
	netlab.Quiet(t, a)
	netlab.Quiet(t, b)
	la, lb := netlab.Veth(t, a, "a0", b, "b0")
	netlab.AddAddr(t, a, "a0", "10.9.1.1/24")
	netlab.AddAddr(t, b, "b0", "10.9.1.2/24")
	// Pinned neighbours: the only ARP is the one asked for below.
	netlab.Neigh(t, a, "a0", "10.9.1.2", lb.Attrs().HardwareAddr)
	netlab.Neigh(t, b, "b0", "10.9.1.1", la.Attrs().HardwareAddr)

	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4})
	testkit.Need(t, "BPF maps", err) // root, yet no BPF: fails in CI
	defer m.Close()
	const egressA, ingressB = 0, 2 // +0: IPv4 packet, +1: ARP
	attach(t, a, la.Attrs().Index, ebpf.AttachTCXEgress, cookieProg(t, m, egressA))
	attach(t, b, lb.Attrs().Index, ebpf.AttachTCXIngress, cookieProg(t, m, ingressB))

	// A datagram from a socket in a, then an ARP request for an address
	// nobody has, which the kernel sends without a socket.
	if err := netlab.UDPSend(a, "10.9.1.1:5000", "10.9.1.2:5001", []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	if err := netlab.UDPSend(a, "", "10.9.1.3:5001", []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	got := make([]uint64, 4)
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for k := range got {
			if err := m.Lookup(uint32(k), &got[k]); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Contains(got, 0) || time.Now().After(deadline) {
			break
		}
	}
	ca, _ := ifaces.NetnsCookie(a.Path)
	cb, _ := ifaces.NetnsCookie(b.Path)
	host, _ := ifaces.NetnsCookie("")
	t.Logf("helper: a0 egress ip %d arp %d, b0 ingress ip %d arp %d; NetnsCookie a %d, b %d, host %d",
		got[0], got[1], got[2], got[3], ca, cb, host)

	if got[egressA] != ca {
		t.Errorf("a0 egress, packet of a socket in a: helper %d, want NetnsCookie(a) %d", got[egressA], ca)
	}
	if got[ingressB] != ca {
		t.Errorf("b0 ingress, same packet: helper %d, want the sender's NetnsCookie(a) %d (b is %d)", got[ingressB], ca, cb)
	}
	if inInitNetns() {
		for _, k := range []int{egressA + 1, ingressB + 1} {
			if got[k] != host {
				t.Errorf("ARP without socket (key %d): helper %d, want the initial netns cookie %d", k, got[k], host)
			}
		}
	}
}

// cookieProg stores bpf_get_netns_cookie(skb) in m at base (IPv4) or base+1
// (ARP) and passes the packet on (TCX_NEXT).
func cookieProg(t *testing.T, m *ebpf.Map, base int64) *ebpf.Program {
	const protocolOff = 16 // offsetof(struct __sk_buff, protocol)
	// protocol holds the big-endian EtherType; a native load reads its bytes.
	arp := int32(binary.NativeEndian.Uint16([]byte{0x08, 0x06}))
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SchedCLS,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.FnGetNetnsCookie.Call(), // r1 still holds the skb
			asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
			asm.LoadMem(asm.R2, asm.R6, protocolOff, asm.Word),
			asm.Mov.Imm(asm.R3, int32(base)),
			asm.JNE.Imm(asm.R2, arp, "store"),
			asm.Mov.Imm(asm.R3, int32(base+1)),
			asm.StoreMem(asm.RFP, -12, asm.R3, asm.Word).WithSymbol("store"),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -12),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -8),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnMapUpdateElem.Call(),
			asm.Mov.Imm(asm.R0, -1),
			asm.Return(),
		},
	})
	if err != nil {
		t.Skipf("cannot load tc program (bpf_get_netns_cookie in tc needs kernel >= 6.13): %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// attach links p to ifindex in ns: tcx resolves the ifindex in the calling
// thread's namespace, hence InNetns.
func attach(t *testing.T, ns *netlab.Netns, ifindex int, at ebpf.AttachType, p *ebpf.Program) {
	var l tcx.Link
	err := ifaces.InNetns(ns.Path, func() (err error) {
		l, err = tcx.AttachTCX(tcx.TCXOptions{Interface: ifindex, Program: p, Attach: at})
		return err
	})
	if err != nil {
		t.Skipf("cannot attach tcx: %v", err)
	}
	t.Cleanup(func() { l.Close() })
}

// inInitNetns: the initial netns has a fixed inode number (PROC_NET_INIT_INO).
func inInitNetns() bool {
	l, err := os.Readlink("/proc/thread-self/ns/net")
	return err == nil && l == "net:[4026531833]"
}
