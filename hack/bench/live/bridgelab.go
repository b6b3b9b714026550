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
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

const (
	hostCliIf, hostSrvIf, bridgeIf = "flbhc0", "flbhs0", "flbhbr0"
	// The regex flowlens' --interfaces takes for the two host-side veths.
	hostIfRegex = "/^flbh[cs]0$/"
)

// hostIfs are the interfaces both agents attach to, in the host namespace.
var hostIfs = []string{hostCliIf, hostSrvIf}

func newBridgeLab(offloads bool) (*lab, error) {
	if !offloads {
		if _, err := exec.LookPath("ethtool"); err != nil {
			return nil, errors.New("ethtool is needed to turn the lab veths' offloads off (apt-get install ethtool), or pass -offloads")
		}
	}
	l := &lab{script: &netlab.Script{}}
	err := l.script.Build(func(t netlab.T) {
		cli, host, srv := l.namespaces(t, "host")
		cliL, _ := netlab.Veth(t, cli, cliIf, host, hostCliIf)
		srvL, _ := netlab.Veth(t, srv, srvIf, host, hostSrvIf)
		// No multicast snooping: the bridge itself sends no queries.
		netlab.QuietBridge(t, host, bridgeIf)
		netlab.SetMaster(t, host, hostCliIf, bridgeIf)
		netlab.SetMaster(t, host, hostSrvIf, bridgeIf)
		netlab.AddAddr(t, cli, cliIf, cliAddr+"/16")
		netlab.AddAddr(t, srv, srvIf, srvAddr+"/16")
		if !offloads {
			for _, d := range []struct {
				ns  *netlab.Netns
				dev string
			}{{cli, cliIf}, {host, hostCliIf}, {host, hostSrvIf}, {srv, srvIf}} {
				netlab.Run(t, d.ns, "ethtool", "-K", d.dev, "tso", "off", "gso", "off", "gro", "off")
			}
		}
		netlab.Neigh(t, cli, cliIf, srvAddr, srvL.Attrs().HardwareAddr)
		netlab.Neigh(t, srv, srvIf, cliAddr, cliL.Attrs().HardwareAddr)
	})
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// hook is one TC attachment point of the lab.
type hook struct{ Dev, Dir string }

func (h hook) String() string { return h.Dev + "/" + h.Dir }

// tcxProgs lists the programs attached with tcx at the ingress and egress
// of the host-side veths and of the bridge (where neither agent should be).
func tcxProgs(ns *netlab.Netns) (map[hook][]ebpf.ProgramID, error) {
	out := map[hook][]ebpf.ProgramID{}
	err := ns.Do(func() error {
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
