package dashboardslab

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// Beyond "returns data": what the lab is known to do must show where the
// panel says it does. Each check gets the panel's targets; keys are panel
// titles (a title no dashboard has fails the test, so this stays in step
// with the dashboards).
var expectations = map[string]func([]targetResult) error{
	"Top source workloads":      labelsInclude(0, "src_workload", "frontend", "backend", "database", "external"),
	"Top destination workloads": labelsInclude(0, "dst_workload", "frontend", "backend", "database", "external"),
	"Top workload pairs (bytes over the range)": func(ts []targetResult) error {
		top := largest(ts[0].Series)
		if top == nil || top.Labels["src_workload"] != "backend" || top.Labels["dst_workload"] != "database" {
			return fmt.Errorf("largest pair %v, want backend → database (the bulk stream)", top)
		}
		return nil
	},
	// The Node Graph: the lab's workloads as nodes, the bulk stream the
	// widest edge.
	"Service map (bytes over the range)": func(ts []targetResult) error {
		if err := labelsInclude(0, "id", "shop/frontend", "shop/backend", "data/database")(ts); err != nil {
			return err
		}
		top := largest(ts[1].Series)
		if top == nil || top.Labels["source"] != "shop/backend" || top.Labels["target"] != "data/database" || top.Labels["id"] != "shop/backend->data/database" {
			return fmt.Errorf("widest edge %v, want shop/backend → data/database (the bulk stream)", top)
		}
		return nil
	},
	"Namespace map (bytes over the range)": labelsInclude(0, "id", "shop", "data"),
	"Bytes by direction":                   labelsInclude(0, "direction", "ingress", "egress"),
	"Dropped packets by cause":             labelsInclude(0, "cause", "NETFILTER_DROP", "NO_SOCKET"),
	"Dropped bytes by cause":               labelsInclude(0, "cause", "NETFILTER_DROP", "NO_SOCKET"),
	"Retransmits by namespace pair":        positive(0),
	"TCP retransmits":                      positive(0),
	"TCP RTT percentiles": func(ts []targetResult) error {
		var p [3]float64
		for i := range p {
			if len(ts[i].Series) != 1 {
				return fmt.Errorf("%s: %d series", ts[i].Legend, len(ts[i].Series))
			}
			p[i] = maxOf(ts[i].Series[0])
		}
		if !(p[0] > 0 && p[0] <= p[1] && p[1] <= p[2]) {
			return fmt.Errorf("max p50 %g, p90 %g, p99 %g: want 0 < p50 ≤ p90 ≤ p99", p[0], p[1], p[2])
		}
		return nil
	},
	"Evictions by reason": labelsInclude(0, "reason", "timer", "pressure"),
	"Map overflow":        positive(0),
	"Kernel ns per packet, per program": func(ts []targetResult) error {
		if err := labelsInclude(0, "program", "flowlens_ingress", "flowlens_egress")(ts); err != nil {
			return err
		}
		for _, s := range ts[0].Series {
			if m := maxOf(s); strings.HasPrefix(s.Labels["program"], "flowlens_") && !(m > 0 && m < 1e6) {
				return fmt.Errorf("%s: %g ns per packet, want between 0 and 1 ms", s.Labels["program"], m)
			}
		}
		return nil
	},
	"Attached interfaces":        lastIs(3),
	"Hooks running":              lastIs(1),
	"Exported flows by exporter": labelsInclude(0, "exporter", "grpc"),
	"Flows received":             positive(0),
	// Feature tcp: the lab's refused connects (frontend → backend:8081)
	// and established ones (→ backend:8080).
	"Failed TCP connects":                  positive(0),
	"Failed TCP connects by workload pair": labelsInclude(0, "result", "refused"),
	"TCP resets by workload pair":          labelsInclude(0, "src_workload", "backend"),
	"TCP handshake p99":                    positive(0),
}

// maxOf is the largest numeric sample of s (NaN if none).
func maxOf(s series) float64 {
	m := math.NaN()
	for _, p := range s.Points {
		if !math.IsNaN(p[1]) && !math.IsInf(p[1], 0) && (math.IsNaN(m) || p[1] > m) {
			m = p[1]
		}
	}
	return m
}

func largest(ss []series) *series {
	var top *series
	for i := range ss {
		if top == nil || maxOf(ss[i]) > maxOf(*top) {
			top = &ss[i]
		}
	}
	return top
}

// labelsInclude: target i has series with each of the label values, each
// with a positive sample.
func labelsInclude(i int, label string, want ...string) func([]targetResult) error {
	return func(ts []targetResult) error {
		got := map[string]float64{}
		for _, s := range ts[i].Series {
			got[s.Labels[label]] = math.Max(got[s.Labels[label]], maxOf(s))
		}
		var missing []string
		for _, w := range want {
			if !(got[w] > 0) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			have := make([]string, 0, len(got))
			for k, v := range got {
				have = append(have, fmt.Sprintf("%s=%g", k, v))
			}
			sort.Strings(have)
			return fmt.Errorf("no positive series with %s %s (have %s)", label, strings.Join(missing, ", "), strings.Join(have, " "))
		}
		return nil
	}
}

// positive: target i has a positive sample.
func positive(i int) func([]targetResult) error {
	return func(ts []targetResult) error {
		for _, s := range ts[i].Series {
			if maxOf(s) > 0 {
				return nil
			}
		}
		return fmt.Errorf("no positive sample in %d series", len(ts[i].Series))
	}
}

// lastIs: target 0's only series ends at v.
func lastIs(v float64) func([]targetResult) error {
	return func(ts []targetResult) error {
		if len(ts[0].Series) != 1 || len(ts[0].Series[0].Points) == 0 {
			return fmt.Errorf("%d series", len(ts[0].Series))
		}
		pts := ts[0].Series[0].Points
		if got := pts[len(pts)-1][1]; got != v {
			return fmt.Errorf("last value %g, want %g", got, v)
		}
		return nil
	}
}

// withPods are the expectations that hold when the lab's addresses resolve
// to pods (the collector's --k8s-static).
var withPods = map[string]func([]targetResult) error{
	"Top source namespaces":      labelsInclude(0, "src_namespace", "shop", "data", "(external)"),
	"Top destination namespaces": labelsInclude(0, "dst_namespace", "shop", "data"),
	"Node-to-node traffic":       labelsInclude(0, "src_node", "node-a", "node-b", "(no node)"),
	"Bytes sent and received per node": func(ts []targetResult) error {
		if err := labelsInclude(0, "src_node", "node-a", "node-b")(ts); err != nil {
			return err
		}
		return labelsInclude(1, "dst_node", "node-a", "node-b")(ts)
	},
	"Decode errors and enrichment misses": func(ts []targetResult) error {
		return labelsInclude(1, "side", "src", "dst")(ts) // the outside client is in no pod
	},
}

// checkExpectations applies the expectations to the results (and those of
// withPods when pods is set).
func checkExpectations(res []boardResult, pods bool) (failures []string) {
	all := maps.Clone(expectations)
	if pods {
		maps.Copy(all, withPods)
	}
	seen := map[string]bool{}
	for _, b := range res {
		for _, p := range b.Panels {
			check, ok := all[p.Title]
			if !ok {
				continue
			}
			seen[p.Title] = true
			if err := check(p.Targets); err != nil {
				failures = append(failures, fmt.Sprintf("%s / panel %q: %v", b.Title, p.Title, err))
			}
		}
	}
	for title := range all {
		if !seen[title] {
			failures = append(failures, fmt.Sprintf("expectation for panel %q, which no dashboard has", title))
		}
	}
	slices.Sort(failures)
	return failures
}
