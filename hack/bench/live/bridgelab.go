package main

// The side-by-side lab (sidebyside.go): a client and a server namespace,
// each joined by a veth to a bridge in a third, "host" namespace:
//
//	client ns            host ns                          server ns
//	flbc0 ─── veth ─── flbhc0 ┐                 ┌ flbhs0 ─── veth ─── flbs0
//	10.201.1.2/16              └──── flbhbr0 ────┘                   10.201.2.2/16
//
// One subnet, no router: every packet of the lab is bridged, and crosses
// exactly the two host-side veths, ingress on one and egress on the other.
// The agents attach only there. IPv6 is off and the neighbours are static
// (no ARP, no neighbour discovery), so nothing but the traffic under test
// crosses the bridge. By default TSO, GSO and GRO are off on the four veths
// (-offloads=false): one skb is then one packet on the wire, so flowlens'
// wire count (a GSO buffer counts as its segments), NetObserv's count (one
// per skb) and the veths' own tx counters all count the same packets, and
// "BPF ns per bridged packet" means the same for both agents.
//
// It reuses the router lab's type: rtr is the host namespace here, and the
// client and server interfaces (flbc0, flbs0) and addresses keep their names,
// so that labTx (the bridged packets: what the client and the server sent),
// runHey and runIperf work on it unchanged.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const (
	hostCliIf, hostSrvIf, bridgeIf = "flbhc0", "flbhs0", "flbhbr0"
	// The regex flowlens' --interfaces takes for the two host-side veths.
	hostIfRegex = "/^flbh[cs]0$/"
)

// hostIfs are the interfaces both agents attach to, in the host namespace.
var hostIfs = []string{hostCliIf, hostSrvIf}

func macOf(ns, dev string) (string, error) {
	out, err := exec.Command("ip", "-n", ns, "-j", "link", "show", "dev", dev).Output()
	if err != nil {
		return "", fmt.Errorf("mac of %s in %s: %v", dev, ns, err)
	}
	var v []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v) == 0 {
		return "", fmt.Errorf("mac of %s in %s: %v", dev, ns, err)
	}
	return v[0].Address, nil
}

func newBridgeLab(offloads bool) (*lab, error) {
	if !offloads {
		if _, err := exec.LookPath("ethtool"); err != nil {
			return nil, errors.New("ethtool is needed to turn the lab veths' offloads off (apt-get install ethtool), or pass -offloads")
		}
	}
	p := fmt.Sprintf("flb-bench-%d", os.Getpid())
	l := &lab{cli: p + "-cli", rtr: p + "-host", srv: p + "-srv"}
	fail := func(err error) (*lab, error) {
		l.close()
		return nil, err
	}
	for _, ns := range []string{l.cli, l.rtr, l.srv} {
		if err := sh("ip", "netns", "add", ns); err != nil {
			return fail(err)
		}
	}
	steps := linkSteps(l, hostCliIf, hostSrvIf)
	steps = append(steps,
		// No multicast snooping: the bridge itself sends no queries.
		[]string{"ip", "-n", l.rtr, "link", "add", bridgeIf, "type", "bridge", "mcast_snooping", "0", "stp_state", "0"},
		[]string{"ip", "-n", l.rtr, "link", "set", hostCliIf, "master", bridgeIf},
		[]string{"ip", "-n", l.rtr, "link", "set", hostSrvIf, "master", bridgeIf},
		[]string{"ip", "-n", l.cli, "addr", "add", cliAddr + "/16", "dev", cliIf},
		[]string{"ip", "-n", l.srv, "addr", "add", srvAddr + "/16", "dev", srvIf},
	)
	if !offloads {
		for _, d := range []struct{ ns, dev string }{{l.cli, cliIf}, {l.rtr, hostCliIf}, {l.rtr, hostSrvIf}, {l.srv, srvIf}} {
			steps = append(steps, []string{"ip", "netns", "exec", d.ns, "ethtool", "-K", d.dev, "tso", "off", "gso", "off", "gro", "off"})
		}
	}
	steps = append(steps,
		[]string{"ip", "-n", l.rtr, "link", "set", bridgeIf, "up"},
		[]string{"ip", "-n", l.rtr, "link", "set", hostCliIf, "up"},
		[]string{"ip", "-n", l.rtr, "link", "set", hostSrvIf, "up"},
		[]string{"ip", "-n", l.cli, "link", "set", cliIf, "up"},
		[]string{"ip", "-n", l.srv, "link", "set", srvIf, "up"},
		// Many short connections from one client address.
		[]string{"ip", "netns", "exec", l.cli, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"},
		[]string{"ip", "netns", "exec", l.cli, "sysctl", "-qw", "net.ipv4.ip_local_port_range=10000 65000"},
	)
	for _, s := range steps {
		if err := sh(s...); err != nil {
			return fail(err)
		}
	}
	for _, n := range []struct{ ns, dev, addr, peerNS, peerDev string }{
		{l.cli, cliIf, srvAddr, l.srv, srvIf},
		{l.srv, srvIf, cliAddr, l.cli, cliIf},
	} {
		m, err := macOf(n.peerNS, n.peerDev)
		if err != nil {
			return fail(err)
		}
		if err := sh("ip", "-n", n.ns, "neigh", "replace", n.addr, "lladdr", m, "dev", n.dev, "nud", "permanent"); err != nil {
			return fail(err)
		}
	}
	return l, nil
}

// inNetns runs f on an OS thread switched to the named namespace.
func inNetns(ns string, f func() error) error {
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with this goroutine instead of
		// serving others from the wrong namespace.
		return fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// hook is one TC attachment point of the lab.
type hook struct{ Dev, Dir string }

func (h hook) String() string { return h.Dev + "/" + h.Dir }

// tcxProgs lists the programs attached with tcx at the ingress and egress
// of the host-side veths and of the bridge (where neither agent should be).
func tcxProgs(ns string) (map[hook][]ebpf.ProgramID, error) {
	out := map[hook][]ebpf.ProgramID{}
	err := inNetns(ns, func() error {
		for _, dev := range append(slices.Clone(hostIfs), bridgeIf) {
			ifi, err := net.InterfaceByName(dev)
			if err != nil {
				return err
			}
			for _, d := range []struct {
				dir string
				at  ebpf.AttachType
			}{{"ingress", ebpf.AttachTCXIngress}, {"egress", ebpf.AttachTCXEgress}} {
				res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: d.at})
				if err != nil {
					return fmt.Errorf("query %s %s: %w", dev, d.dir, err)
				}
				for _, p := range res.Programs {
					out[hook{dev, d.dir}] = append(out[hook{dev, d.dir}], p.ID)
				}
			}
		}
		return nil
	})
	return out, err
}

// progName is a program's kernel name ("" if it is gone).
func progName(id ebpf.ProgramID) string {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Name
}
