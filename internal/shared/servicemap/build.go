package servicemap

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// endpoint is the node a flow's end maps to.
func endpoint(f *enriched.Flow, m *enriched.K8sContext, addr netip.Addr, pods bool) Node {
	if !f.Enriched {
		m = &enriched.K8sContext{}
	}
	switch m.Kind {
	case enriched.KindPod:
		if pods || m.Workload == "" {
			return Node{ID: "pod:" + m.Namespace + "/" + m.Name, Kind: KindPod, Namespace: m.Namespace, Name: m.Name,
				WorkloadKind: m.WorkloadKind, Workload: m.Workload}
		}
		return Node{ID: "workload:" + m.Namespace + "/" + m.WorkloadKind + "/" + m.Workload, Kind: KindWorkload,
			Namespace: m.Namespace, Name: m.Workload, WorkloadKind: m.WorkloadKind}
	case enriched.KindService:
		return Node{ID: "service:" + m.Namespace + "/" + m.Name, Kind: KindService, Namespace: m.Namespace, Name: m.Name,
			WorkloadKind: enriched.WorkloadService}
	case enriched.KindNode:
		name := m.Node
		if name == "" {
			name = m.Name
		}
		if name == "" {
			name = addr.String()
		}
		return Node{ID: "node:" + name, Kind: KindNode, Name: name, WorkloadKind: enriched.WorkloadNode}
	}
	name := m.Subnet
	if name == "" {
		name = cidrOf(addr)
	}
	return Node{ID: "external:" + name, Kind: KindExternal, Name: name}
}

// cidrOf groups an address without a subnet label: its /24 or /64.
func cidrOf(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// keepNode puts n in nodes, with the DNS names its id had so far and, for
// an external node, the flow end's dnsName.
func keepNode(nodes map[string]Node, n Node, dnsName string) {
	old, ok := nodes[n.ID]
	if ok {
		n.DNSNames = old.DNSNames
	}
	n.DNSNames = addName(n.DNSNames, n.Kind, dnsName)
	nodes[n.ID] = n
}

// addName adds name to an external node's names, up to MaxDNSNames.
func addName(names []string, kind, name string) []string {
	if kind != KindExternal || name == "" || len(names) >= MaxDNSNames || slices.Contains(names, name) {
		return names
	}
	return append(names, name)
}

// Ends are the nodes a flow goes from and to.
func Ends(f *enriched.Flow, pods bool) (src, dst Node) {
	return endpoint(f, &f.Src, f.SrcAddr, pods), endpoint(f, &f.Dst, f.DstAddr, pods)
}

// Match says whether f passes q's window and filters (not OnlyUnhealthy,
// which is an edge's).
func (q *Query) Match(f *enriched.Flow) bool {
	if f.EndTime.Before(q.Since) || f.EndTime.After(q.Until) {
		return false
	}
	if len(q.Protocols) > 0 && !slices.Contains(q.Protocols, f.Proto) {
		return false
	}
	if len(q.Ports) > 0 && !slices.Contains(q.Ports, f.SrcPort) && !slices.Contains(q.Ports, f.DstPort) {
		return false
	}
	if len(q.Namespaces) > 0 {
		if !f.Enriched || (!slices.Contains(q.Namespaces, f.Src.Namespace) && !slices.Contains(q.Namespaces, f.Dst.Namespace)) {
			return false
		}
	}
	if len(q.Workloads) > 0 {
		if !f.Enriched || (!workloadIn(q.Workloads, &f.Src) && !workloadIn(q.Workloads, &f.Dst)) {
			return false
		}
	}
	return true
}

func workloadIn(ws []string, m *enriched.K8sContext) bool {
	if m.Workload == "" {
		return false
	}
	for _, w := range ws {
		if w == m.Workload || w == m.Namespace+"/"+m.Workload {
			return true
		}
	}
	return false
}

type edgeKey struct{ src, dst string }

// Build folds flows (a history's snapshot) into q's graph: the flows in
// the window that pass the filters, summed per edge, then capped at
// q.MaxNodes and q.MaxEdges: edges are kept unhealthy first, then by
// bytes, as long as both their ends fit. It reads the flows only (they
// are the history's, shared) and runs on the request's goroutine, never
// on the ingest path.
func Build(flows []*enriched.Flow, q Query) Graph {
	g := Graph{Window: Window{Since: q.Since.UTC(), Until: q.Until.UTC()}}
	nodes := map[string]Node{}
	edges := map[edgeKey]*Edge{}
	for _, f := range flows {
		if !q.Match(f) {
			continue
		}
		g.Flows++
		src, dst := Ends(f, q.Pods)
		keepNode(nodes, src, f.SrcDNSName)
		keepNode(nodes, dst, f.DstDNSName)
		k := edgeKey{src.ID, dst.ID}
		e := edges[k]
		if e == nil {
			e = &Edge{Source: src.ID, Target: dst.ID, DropCauses: map[string]uint64{}}
			edges[k] = e
		}
		e.add(f)
	}
	all := make([]*Edge, 0, len(edges))
	for _, e := range edges {
		e.finish(q.SlowRTT)
		all = append(all, e)
	}
	g.assemble(all, nodes, q)
	return g
}

// assemble puts the edges that pass q.OnlyUnhealthy on g within the caps:
// unhealthy first, then by bytes, as long as both ends fit; the nodes'
// totals are those of their kept edges.
func (g *Graph) assemble(all []*Edge, nodes map[string]Node, q Query) {
	if q.OnlyUnhealthy {
		all = slices.DeleteFunc(all, func(e *Edge) bool { return !e.Unhealthy })
	}
	slices.SortFunc(all, func(a, b *Edge) int {
		if a.Unhealthy != b.Unhealthy {
			if a.Unhealthy {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Target, b.Target))
	})
	kept := map[string]*Node{}
	keep := func(id string) *Node {
		n := nodes[id]
		n.Bytes, n.Packets, n.DropPackets = 0, 0, 0
		n.DNSNames = slices.Clone(n.DNSNames)
		slices.Sort(n.DNSNames)
		kept[id] = &n
		return &n
	}
	wanted := map[string]bool{} // every node of an edge that passed
	g.Edges = []Edge{}
	for _, e := range all {
		wanted[e.Source], wanted[e.Target] = true, true
		need := 0
		if kept[e.Source] == nil {
			need++
		}
		if kept[e.Target] == nil && e.Target != e.Source {
			need++
		}
		if len(g.Edges) >= q.MaxEdges || len(kept)+need > q.MaxNodes {
			g.OmittedEdges++
			continue
		}
		s, t := kept[e.Source], kept[e.Target]
		if s == nil {
			s = keep(e.Source)
		}
		if t == nil {
			t = keep(e.Target)
		}
		s.Bytes, s.Packets, s.DropPackets = s.Bytes+e.Bytes, s.Packets+e.Packets, s.DropPackets+e.DropPackets
		if t != s {
			t.Bytes, t.Packets, t.DropPackets = t.Bytes+e.Bytes, t.Packets+e.Packets, t.DropPackets+e.DropPackets
		}
		g.Edges = append(g.Edges, *e)
	}
	g.OmittedNodes += len(wanted) - len(kept)
	g.Truncated = g.OmittedEdges > 0 || g.OmittedNodes > 0
	g.Nodes = make([]Node, 0, len(kept))
	for _, n := range kept {
		g.Nodes = append(g.Nodes, *n)
	}
	slices.SortFunc(g.Nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
}

func (e *Edge) add(f *enriched.Flow) {
	e.Flows++
	e.Bytes += f.Bytes
	e.Packets += f.Packets
	if f.DropPackets > 0 {
		e.DropPackets += f.DropPackets
		cause := f.DropCause
		if cause == "" {
			cause = "UNKNOWN"
		}
		e.DropCauses[cause] += f.DropPackets
	}
	if f.RTT > 0 {
		e.rtts = append(e.rtts, int64(f.RTT))
	}
	e.Retransmits += f.Retransmits
	if !slices.Contains(e.Protocols, protoName(f.Proto)) {
		e.Protocols = append(e.Protocols, protoName(f.Proto))
	}
	if f.DstPort != 0 && len(e.Ports) < maxPorts && !slices.Contains(e.Ports, f.DstPort) {
		e.Ports = append(e.Ports, f.DstPort)
	}
	addHealth(e, f)
}

// finish computes the RTT median and the health.
func (e *Edge) finish(slow time.Duration) {
	if n := len(e.rtts); n > 0 {
		slices.Sort(e.rtts)
		e.RTTP50 = e.rtts[(n-1)/2]
	}
	e.rtts = nil
	slices.Sort(e.Ports)
	slices.Sort(e.Protocols)
	e.Unhealthy = e.DropPackets > 0 || e.Retransmits > 0 || e.FailedConnects > 0 || (slow > 0 && e.RTTP50 > int64(slow))
}

// EdgeFlows are the flows of the edge q.Source → q.Target that pass q,
// newest (by end time) first, at most q.Last; matched counts all of them.
func EdgeFlows(flows []*enriched.Flow, q Query) (out []*enriched.Flow, matched int) {
	for _, f := range flows {
		if !q.Match(f) {
			continue
		}
		src, dst := Ends(f, q.Pods)
		if src.ID != q.Source || dst.ID != q.Target {
			// an id of the other granularity (a pod's edge asked of the
			// workload graph, or the reverse)
			ps, pd := Ends(f, !q.Pods)
			if ps.ID != q.Source || pd.ID != q.Target {
				continue
			}
		}
		out = append(out, f)
	}
	matched = len(out)
	slices.SortStableFunc(out, func(a, b *enriched.Flow) int { return b.EndTime.Compare(a.EndTime) })
	if len(out) > q.Last {
		out = out[:q.Last]
	}
	return out, matched
}
