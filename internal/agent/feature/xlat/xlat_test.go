package xlat_test

import (
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// natLab is a client and a backend joined through a router namespace that
// DNATs a Service's virtual IP to the backend, as kube-proxy does for a
// ClusterIP Service:
//
//	cli (10.61.0.1) -- c0 | r0 -- rtr -- r1 | b0 -- be (10.62.0.2)
//	rtr: 10.96.0.10:80/tcp -> 10.62.0.2:8080, 10.96.0.10:53/udp -> 10.62.0.2:5353
//
// The agent watches the router's two interfaces.
type natLab struct {
	cli, rtr, be *netlab.Netns
}

const (
	natVIP, natClient, natBackend, natRouterB = "10.96.0.10", "10.61.0.1", "10.62.0.2", "10.62.0.254"
)

func newNATLab(t *testing.T, masquerade bool) *natLab {
	l := &natLab{cli: netlab.NewNetns(t, "cli"), rtr: netlab.NewNetns(t, "rtr"), be: netlab.NewNetns(t, "be")}
	for _, ns := range []*netlab.Netns{l.cli, l.rtr, l.be} {
		netlab.Quiet(t, ns)
	}
	if err := netlab.Sysctl(l.rtr, "net.ipv4.ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	c0, r0 := netlab.Veth(t, l.cli, "c0", l.rtr, "r0")
	r1, b0 := netlab.Veth(t, l.rtr, "r1", l.be, "b0")
	netlab.AddAddr(t, l.cli, "c0", natClient+"/24")
	netlab.AddAddr(t, l.rtr, "r0", "10.61.0.254/24")
	netlab.AddAddr(t, l.rtr, "r1", natRouterB+"/24")
	netlab.AddAddr(t, l.be, "b0", natBackend+"/24")
	netlab.Neigh(t, l.cli, "c0", "10.61.0.254", r0.Attrs().HardwareAddr)
	netlab.Neigh(t, l.rtr, "r0", natClient, c0.Attrs().HardwareAddr)
	netlab.Neigh(t, l.rtr, "r1", natBackend, b0.Attrs().HardwareAddr)
	netlab.Neigh(t, l.be, "b0", natRouterB, r1.Attrs().HardwareAddr)
	netlab.Route(t, l.cli, "10.96.0.0/16", "10.61.0.254", "c0")
	netlab.Route(t, l.cli, "10.62.0.0/24", "10.61.0.254", "c0")
	netlab.Route(t, l.be, "10.61.0.0/24", natRouterB, "b0")
	netlab.Run(t, l.rtr, "nft", "add table ip svc")
	netlab.Run(t, l.rtr, "nft", "add chain ip svc pre { type nat hook prerouting priority dstnat; }")
	netlab.Run(t, l.rtr, "nft", "add rule ip svc pre ip daddr "+natVIP+" tcp dport 80 dnat to "+natBackend+":8080")
	netlab.Run(t, l.rtr, "nft", "add rule ip svc pre ip daddr "+natVIP+" udp dport 53 dnat to "+natBackend+":5353")
	if masquerade {
		netlab.Run(t, l.rtr, "nft", "add chain ip svc post { type nat hook postrouting priority srcnat; }")
		netlab.Run(t, l.rtr, "nft", "add rule ip svc post oifname r1 masquerade")
	}
	return l
}

// Service DNAT (and SNAT by masquerade): the flows to the virtual IP carry
// the backend's address and port, exactly, for TCP and UDP; their replies
// the virtual IP they become; untranslated flows carry nothing.
func TestXlat(t *testing.T) {
	for _, masquerade := range []bool{false, true} {
		name := "dnat"
		if masquerade {
			name = "dnat+masquerade"
		}
		t.Run(name, func(t *testing.T) {
			l := newNATLab(t, masquerade)
			got := agenttest.TCPSink(t, l.be, "tcp4", natBackend+":8080")
			agenttest.MustListen(t, l.be, natBackend+":5353")
			agenttest.MustListen(t, l.be, natBackend+":9000")
			h := agenttest.Start(t, 2, agent.Options{}, "--netns="+l.rtr.Name, "--features=xlat")
			const size = 64 << 10
			cport := agenttest.TCPSend(t, l.cli, "tcp4", natVIP+":80", size)
			agenttest.AwaitReceived(t, got, size)
			if err := netlab.UDPSend(l.cli, natClient+":4000", natVIP+":53", []byte("q"), 5); err != nil {
				t.Fatal(err)
			}
			// No NAT: straight to the backend.
			if err := netlab.UDPSend(l.cli, natClient+":4001", natBackend+":9000", []byte("u"), 5); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			flows := h.Stop()

			check := func(what string, m agenttest.Match, src string, sport uint16, dst string, dport uint16, anySport bool) {
				t.Helper()
				_, _, recs := agenttest.Sum(flows, m)
				if len(recs) == 0 {
					t.Errorf("%s: no flow %+v", what, m)
					return
				}
				for _, r := range recs {
					if r.XlatDstAddr != dst || r.XlatDstPort != dport || r.XlatSrcAddr != src || (!anySport && r.XlatSrcPort != sport) || (anySport && r.XlatSrcPort == 0) {
						t.Errorf("%s %+v: xlat %s:%d -> %s:%d, want %s:%d -> %s:%d", what, m,
							r.XlatSrcAddr, r.XlatSrcPort, r.XlatDstAddr, r.XlatDstPort, src, sport, dst, dport)
					}
				}
			}
			srcAfter, anyPort := natClient, false
			if masquerade {
				srcAfter, anyPort = natRouterB, true // masquerade may pick another port
			}
			check("tcp to the VIP", agenttest.Match{Src: natClient, Dst: natVIP, Sport: uint16(cport), Dport: 80, Proto: 6},
				srcAfter, uint16(cport), natBackend, 8080, anyPort)
			check("udp to the VIP", agenttest.Match{Src: natClient, Dst: natVIP, Sport: 4000, Dport: 53, Proto: 17},
				srcAfter, 4000, natBackend, 5353, anyPort)
			// The replies, as they arrive from the backend, become the VIP's.
			replyDst := natClient
			if masquerade {
				replyDst = natRouterB
			}
			check("tcp reply", agenttest.Match{Src: natBackend, Dst: replyDst, Sport: 8080, Proto: 6},
				natVIP, 80, natClient, uint16(cport), false)
			// The packets after NAT are in those flows, not in flows of
			// their own (docs/design/counting.md, Translated packets).
			for _, m := range []agenttest.Match{
				{Src: srcAfter, Dst: natBackend, Dport: 8080, Proto: 6},
				{Src: srcAfter, Dst: natBackend, Dport: 5353, Proto: 17},
				{Src: natVIP, Sport: 80, Proto: 6},
			} {
				if pk, _, recs := agenttest.Sum(flows, m); len(recs) != 0 {
					t.Errorf("%d records (%d packets) under the tuple after NAT %+v", len(recs), pk, m)
				}
			}
			direct := agenttest.Match{Src: natClient, Dst: natBackend, Sport: 4001, Dport: 9000, Proto: 17}
			if masquerade {
				// SNAT alone: the source becomes the router's.
				check("udp to the backend, masqueraded", direct, natRouterB, 4001, natBackend, 9000, true)
				return
			}
			// Untranslated: no xlat fields.
			_, _, recs := agenttest.Sum(flows, direct)
			if len(recs) == 0 {
				t.Errorf("no flow %+v", direct)
			}
			for _, r := range recs {
				if r.XlatSrcAddr != "" || r.XlatDstAddr != "" || r.XlatSrcPort != 0 || r.XlatDstPort != 0 {
					t.Errorf("untranslated flow %+v has xlat %s:%d -> %s:%d", direct, r.XlatSrcAddr, r.XlatSrcPort, r.XlatDstAddr, r.XlatDstPort)
				}
			}
		})
	}
}

// TestAliasMapSize: the map of post-NAT tuples (xlat_alias) is sized like
// the flow maps, from --cache-max-flows, so the memory estimate (the maps'
// memlock, internal/agent/memory.go) grows with it; without the feature it
// keeps one entry.
func TestAliasMapSize(t *testing.T) {
	for _, c := range []struct {
		features string
		want     uint32
	}{{"--features=xlat", 12345}, {"--features=drops", 1}} {
		l := newNATLab(t, false)
		h := agenttest.Start(t, 2, agent.Options{}, "--netns="+l.rtr.Name, c.features, "--cache-max-flows=12345")
		got := h.A.DP.Maps.XlatAlias.MaxEntries()
		flows := h.A.DP.Maps.Flows[0].MaxEntries()
		mem, err := datapath.MapMemory(h.A.DP.Maps.XlatAlias)()
		fmem, ferr := datapath.MapMemory(h.A.DP.Maps.Flows[0])()
		h.Stop()
		if err != nil || ferr != nil {
			t.Fatal(err, ferr)
		}
		t.Logf("%s: xlat_alias %d entries, %d bytes; a flow map %d bytes", c.features, got, mem, fmem)
		if got != c.want || flows != 12345 {
			t.Errorf("%s: xlat_alias has %d entries, want %d (flow maps %d)", c.features, got, c.want, flows)
		}
	}
}
