package servicemap

import (
	"maps"
	"slices"
)

// Merge joins the graphs of several collectors (each has the flows its
// agents sent it) into one within q's caps: nodes by id, edges by their
// ends, counts summed. An edge's RTT median is the largest of the
// collectors' medians (a bound, not a median of all the flows), and the
// omitted counts add up the collectors' own (an edge one collector left
// out may be counted by another too).
func Merge(gs []Graph, q Query) Graph {
	out := Graph{Window: Window{Since: q.Since.UTC(), Until: q.Until.UTC()}, Collectors: len(gs)}
	nodes := map[string]Node{}
	edges := map[edgeKey]*Edge{}
	for _, g := range gs {
		out.Flows += g.Flows
		out.OmittedNodes += g.OmittedNodes
		out.OmittedEdges += g.OmittedEdges
		for _, n := range g.Nodes {
			old, ok := nodes[n.ID]
			if ok {
				names := slices.Clone(old.DNSNames)
				for _, name := range n.DNSNames {
					names = addName(names, n.Kind, name)
				}
				n.DNSNames = names
			}
			nodes[n.ID] = n
		}
		for _, e := range g.Edges {
			k := edgeKey{e.Source, e.Target}
			m := edges[k]
			if m == nil {
				c := e
				c.DropCauses = maps.Clone(e.DropCauses)
				if c.DropCauses == nil {
					c.DropCauses = map[string]uint64{}
				}
				c.Ports, c.Protocols = slices.Clone(e.Ports), slices.Clone(e.Protocols)
				edges[k] = &c
				continue
			}
			m.Bytes += e.Bytes
			m.Packets += e.Packets
			m.Flows += e.Flows
			m.DropPackets += e.DropPackets
			for c, n := range e.DropCauses {
				m.DropCauses[c] += n
			}
			m.RTTP50 = max(m.RTTP50, e.RTTP50)
			m.Retransmits += e.Retransmits
			m.FailedConnects += e.FailedConnects
			for _, p := range e.Ports {
				if len(m.Ports) < maxPorts && !slices.Contains(m.Ports, p) {
					m.Ports = append(m.Ports, p)
				}
			}
			for _, p := range e.Protocols {
				if !slices.Contains(m.Protocols, p) {
					m.Protocols = append(m.Protocols, p)
				}
			}
			m.Unhealthy = m.Unhealthy || e.Unhealthy
		}
	}
	all := make([]*Edge, 0, len(edges))
	for _, e := range edges {
		slices.Sort(e.Ports)
		slices.Sort(e.Protocols)
		all = append(all, e)
	}
	out.assemble(all, nodes, q)
	return out
}
