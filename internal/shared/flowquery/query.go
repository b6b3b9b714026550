// Package flowquery is the flow query of the collector's history
// (FlowHistory.GetFlows, follow mode included) and of `flowlens observe`,
// which checks its flags with it before asking: the FlowFilter messages of
// api/flow/v1/history.proto compiled into a Query that matches
// enriched.Flows.
//
// A query is a list of filters (terms): a flow matches when it matches
// every term, and a term when it meets every criterion set in it, negated
// by the term's not. A criterion with several values matches any of them.
// Each criterion is one file here (namespace.go, pod.go, workload.go,
// node.go, ip.go, port.go, protocol.go, drops.go, dropcause.go,
// tcpflags.go, rtt.go, dnsrcode.go, tcpfailed.go, tcpresult.go), with its test beside it: a new one is
// its FlowFilter field, its file, and its line in criteria.
//
//	q, err := flowquery.Compile(req.Filters) // err names the field: filters[1].from_ip: ...
//	if q.Match(&f) { ... }
package flowquery

import (
	"fmt"
	"slices"
	"strings"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// Query is a compiled query: a flow matches when every term does. The zero
// Query matches every flow.
type Query []term

// term is one compiled FlowFilter.
type term struct {
	not    bool
	checks []check // all must hold
}

// check is one compiled criterion.
type check func(*enriched.Flow) bool

// criterion compiles one criterion of ff: its checks, none when ff leaves
// it unset, or an error that starts with the field's name.
type criterion func(ff *flowv1.FlowFilter) ([]check, error)

// criteria are the criteria of a FlowFilter, in the order they are checked
// (the first bad field is the one reported).
var criteria = []criterion{
	namespace, pod, workload, node, ips, ports, protocol, drops, dropCause, tcpFlags, rttAbove, dnsRcode, tcpFailed, tcpResult,
}

// Compile checks and compiles filters (see FlowFilter in
// api/flow/v1/history.proto for their meaning). Errors name the field:
// filters[i].field: why.
func Compile(filters []*flowv1.FlowFilter) (Query, error) {
	out := make(Query, 0, len(filters))
	for i, ff := range filters {
		t := term{not: ff.GetNot()}
		for _, c := range criteria {
			checks, err := c(ff)
			if err != nil {
				return nil, fmt.Errorf("filters[%d].%w", i, err)
			}
			t.checks = append(t.checks, checks...)
		}
		out = append(out, t)
	}
	return out, nil
}

// Terms is the size of filters as the collector bounds it
// (--history-max-filter-terms): one per FlowFilter and one per value of
// its repeated fields. Matching costs about that much per flow.
func Terms(filters []*flowv1.FlowFilter) int {
	n := 0
	for _, f := range filters {
		n += 1 + len(f.Namespace) + len(f.Pod) + len(f.Workload) + len(f.Node) + len(f.Ip) + len(f.FromIp) + len(f.ToIp) +
			len(f.Port) + len(f.FromPort) + len(f.ToPort) + len(f.Protocol) + len(f.DropCause) + len(f.TcpFlags) + len(f.DnsRcode) + len(f.TcpResult)
	}
	return n
}

// Match reports whether f matches every term (AND), each term negated by
// its not.
func (q Query) Match(f *enriched.Flow) bool {
	for i := range q {
		if q[i].match(f) == q[i].not {
			return false
		}
	}
	return true
}

func (t *term) match(f *enriched.Flow) bool {
	for _, c := range t.checks {
		if !c(f) {
			return false
		}
	}
	return true
}

// one is a criterion's single check, or none when the field is unset.
func one(set bool, c check) []check {
	if !set {
		return nil
	}
	return []check{c}
}

// anyEnd reports whether the Kubernetes context of either end satisfies
// fn; never for a flow without enrichment.
func anyEnd(f *enriched.Flow, fn func(*enriched.K8sContext) bool) bool {
	return f.Enriched && (fn(&f.Src) || fn(&f.Dst))
}

// nameIn matches "name" or "namespace/name".
func nameIn(v []string, ns, name string) bool {
	for _, x := range v {
		if n, rest, ok := strings.Cut(x, "/"); ok {
			if n == ns && rest == name {
				return true
			}
		} else if x == name {
			return true
		}
	}
	return false
}

// in reports whether x is one of v.
func in[T comparable](v []T, x T) bool { return slices.Contains(v, x) }
