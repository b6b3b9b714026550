// Package servicemap is the service map's contract and its computation
// (docs/ui.md): the JSON of GET /api/v1/graph (Graph: nodes, edges, the
// window, truncated) and of GET /api/v1/flows (Flows), the request's
// filters (Query, parsed from the URL by ParseQuery), Build, which folds a
// history's flows into a bounded graph, and Merge, which joins the graphs
// of several collectors (flowlens ui). It lives in internal/shared because
// both the collector (internal/collector/ui serves it from the history)
// and flowlens (cmd/flowlens merges collectors) speak it, and flowlens
// links nothing of the collector.
//
// Nodes: a pod's flows go to its workload ("workload:ns/Kind/name"), or
// with Query.Pods to the pod itself ("pod:ns/name"); a Service ClusterIP
// is "service:ns/name", a node address (host network) "node:name", and an
// address outside the cluster "external:" its subnet label (--subnets), or
// its /24 (IPv4) or /64 (IPv6) without one. Edges are directed as the
// flows are: a flow from A to B adds to the edge A→B (a TCP conversation's
// replies make the edge B→A).
package servicemap
