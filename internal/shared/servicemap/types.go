package servicemap

import (
	"encoding/json"
	"time"
)

// Node kinds (Node.Kind).
const (
	KindWorkload = "workload"
	KindPod      = "pod"
	KindService  = "service"
	KindNode     = "node"
	KindExternal = "external"
)

// Graph is GET /api/v1/graph's answer.
type Graph struct {
	Nodes  []Node `json:"nodes"`
	Edges  []Edge `json:"edges"`
	Window Window `json:"window"`
	// Truncated says the caps left nodes or edges out: OmittedNodes and
	// OmittedEdges count them (the edges with the least traffic go first,
	// unhealthy ones last).
	Truncated    bool `json:"truncated"`
	OmittedNodes int  `json:"omitted_nodes"`
	OmittedEdges int  `json:"omitted_edges"`
	// Flows is how many of the history's flows the graph sums (those in
	// the window that pass the filters).
	Flows int `json:"flows"`
	// Collectors is how many collectors' graphs were merged (flowlens ui);
	// 0 from one collector.
	Collectors int `json:"collectors,omitempty"`
}

// Window is the time window the graph covers: flows that ended in it.
type Window struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
}

// Node is one end of edges.
type Node struct {
	ID           string `json:"id"`
	Kind         string `json:"kind"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	WorkloadKind string `json:"workload_kind"`
	// Workload is a pod's workload (Kind pod), for grouping pods under it.
	Workload string `json:"workload,omitempty"`
	// DNSNames are an external node's names: the src_dns_name or
	// dst_dns_name its addresses carried in the window's flows (the names
	// the agents' dns feature saw answered for them), sorted, at most
	// MaxDNSNames.
	DNSNames []string `json:"dns_names,omitempty"`
	// Totals over the node's edges in the graph (both directions).
	Bytes       uint64 `json:"bytes"`
	Packets     uint64 `json:"packets"`
	DropPackets uint64 `json:"drop_packets"`
}

// Edge is the traffic from Source to Target in the window.
type Edge struct {
	Source      string `json:"source"`
	Target      string `json:"target"`
	Bytes       uint64 `json:"bytes"`
	Packets     uint64 `json:"packets"`
	Flows       uint64 `json:"flows"`
	DropPackets uint64 `json:"drop_packets"`
	// DropCauses maps the kernel's drop reasons to the dropped packets of
	// the flows whose last drop had that reason.
	DropCauses map[string]uint64 `json:"drop_causes"`
	// RTTP50 is the median of the flows' smoothed RTTs (those with one),
	// in nanoseconds; 0: none measured.
	RTTP50      int64  `json:"rtt_p50_ns"`
	Retransmits uint64 `json:"retransmits"`
	// FailedConnects counts the connection attempts the edge's flows
	// started that were refused or timed out (feature tcp: tcp_refused +
	// tcp_timeouts; addHealth, health.go).
	FailedConnects uint64 `json:"failed_connects"`
	// Ports are the destination ports seen (at most maxPorts), Protocols
	// the protocols ("tcp", "udp", "icmp", or the number).
	Ports     []uint16 `json:"ports"`
	Protocols []string `json:"protocols"`
	// Unhealthy: drops, retransmits, failed connects, or an RTT median
	// above Query.SlowRTT.
	Unhealthy bool `json:"unhealthy"`

	rtts []int64 // the flows' RTTs until finish
}

// Flows is GET /api/v1/flows's answer: the edge's flows, newest first, as
// the history has them (each the JSON flowlens-collector --output json
// prints: the record, node_name, agent_ip, src_k8s, dst_k8s).
type Flows struct {
	Source string            `json:"source"`
	Target string            `json:"target"`
	Flows  []json.RawMessage `json:"flows"`
	// Truncated: more flows matched than Last; Matched counts them.
	Truncated bool   `json:"truncated"`
	Matched   int    `json:"matched"`
	Window    Window `json:"window"`
}
