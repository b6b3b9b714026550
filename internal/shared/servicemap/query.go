package servicemap

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults and bounds of a Query.
const (
	DefaultSince    = 5 * time.Minute
	DefaultMaxNodes = 300
	DefaultMaxEdges = 1000
	DefaultSlowRTT  = 100 * time.Millisecond
	DefaultLast     = 100
	MaxLast         = 1000
	maxTerms        = 64 // values of one filter
	maxPorts        = 16 // ports listed on one edge
	// MaxDNSNames bounds the names listed on one external node.
	MaxDNSNames = 8
)

// Query is what a graph or flows request asks: the window, the filters
// and, for /api/v1/flows, the edge.
type Query struct {
	Since, Until time.Time
	// Namespaces, Workloads: a flow passes when either end is in one of
	// them (a workload is "name" or "namespace/name").
	Namespaces, Workloads []string
	Ports                 []uint16 // either end's port
	Protocols             []uint8
	OnlyUnhealthy         bool
	// Pods puts pods instead of their workloads on the graph.
	Pods bool
	// SlowRTT: an edge whose RTT median is above it is unhealthy.
	SlowRTT time.Duration
	// MaxNodes and MaxEdges cap the graph (the collector's --ui-max-*,
	// never more).
	MaxNodes, MaxEdges int

	// /api/v1/flows: the edge and how many of its flows, newest first.
	Source, Target string
	Last           int
}

// ParseQuery reads a request's parameters (docs/ui.md): since and until
// (a duration back from now, "5m", or an RFC 3339 time), namespace,
// workload, port, protocol (each repeated or comma-separated),
// only_unhealthy, pods, slow_rtt, max_nodes, max_edges (at most the given
// caps), source, target, last. Errors name the parameter.
func ParseQuery(v url.Values, now time.Time, maxNodes, maxEdges int) (Query, error) {
	q := Query{Until: now, Since: now.Add(-DefaultSince), SlowRTT: DefaultSlowRTT, MaxNodes: maxNodes, MaxEdges: maxEdges, Last: DefaultLast}
	var errs []error
	bad := func(name, val string, err error) { errs = append(errs, fmt.Errorf("%s=%q: %w", name, val, err)) }
	when := func(name string, dst *time.Time) {
		s := v.Get(name)
		if s == "" {
			return
		}
		if d, err := time.ParseDuration(s); err == nil {
			if d < 0 {
				bad(name, s, errors.New("a negative duration"))
				return
			}
			*dst = now.Add(-d)
			return
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			bad(name, s, errors.New("want a duration back from now (5m) or an RFC 3339 time"))
			return
		}
		*dst = t
	}
	when("since", &q.Since)
	when("until", &q.Until)
	if q.Since.After(q.Until) {
		errs = append(errs, fmt.Errorf("since %s is after until %s", q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339)))
	}
	list := func(name string) []string {
		var out []string
		for _, s := range v[name] {
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
		}
		if len(out) > maxTerms {
			bad(name, strings.Join(v[name], ","), fmt.Errorf("%d values, max %d", len(out), maxTerms))
			return nil
		}
		return out
	}
	q.Namespaces, q.Workloads = list("namespace"), list("workload")
	for _, s := range list("port") {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 {
			bad("port", s, errors.New("want a port from 1 to 65535"))
			continue
		}
		q.Ports = append(q.Ports, uint16(p))
	}
	for _, s := range list("protocol") {
		p, ok := protoNumber(s)
		if !ok {
			bad("protocol", s, errors.New("want tcp, udp, icmp, icmpv6, sctp or a number from 0 to 255"))
			continue
		}
		q.Protocols = append(q.Protocols, p)
	}
	flag := func(name string, dst *bool) {
		if s := v.Get(name); s != "" {
			b, err := strconv.ParseBool(s)
			if err != nil {
				bad(name, s, errors.New("want true or false"))
			}
			*dst = b
		}
	}
	flag("only_unhealthy", &q.OnlyUnhealthy)
	flag("pods", &q.Pods)
	if s := v.Get("slow_rtt"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			bad("slow_rtt", s, errors.New("want a positive duration (100ms)"))
		}
		q.SlowRTT = d
	}
	num := func(name string, dst *int, limit int) {
		if s := v.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > limit {
				bad(name, s, fmt.Errorf("want a number from 1 to %d", limit))
				return
			}
			*dst = n
		}
	}
	num("max_nodes", &q.MaxNodes, maxNodes)
	num("max_edges", &q.MaxEdges, maxEdges)
	num("last", &q.Last, MaxLast)
	q.Source, q.Target = v.Get("source"), v.Get("target")
	return q, errors.Join(errs...)
}

// Values is q as request parameters (flowlens ui sends a page's query on
// to every collector): the inverse of ParseQuery with absolute times.
func (q *Query) Values() url.Values {
	v := url.Values{}
	v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	for _, s := range q.Namespaces {
		v.Add("namespace", s)
	}
	for _, s := range q.Workloads {
		v.Add("workload", s)
	}
	for _, p := range q.Ports {
		v.Add("port", strconv.Itoa(int(p)))
	}
	for _, p := range q.Protocols {
		v.Add("protocol", strconv.Itoa(int(p)))
	}
	if q.OnlyUnhealthy {
		v.Set("only_unhealthy", "true")
	}
	if q.Pods {
		v.Set("pods", "true")
	}
	v.Set("slow_rtt", q.SlowRTT.String())
	if q.Source != "" {
		v.Set("source", q.Source)
	}
	if q.Target != "" {
		v.Set("target", q.Target)
	}
	v.Set("last", strconv.Itoa(q.Last))
	return v
}

func protoNumber(s string) (uint8, bool) {
	switch strings.ToLower(s) {
	case "tcp":
		return 6, true
	case "udp":
		return 17, true
	case "icmp":
		return 1, true
	case "icmpv6":
		return 58, true
	case "sctp":
		return 132, true
	}
	n, err := strconv.ParseUint(s, 10, 8)
	return uint8(n), err == nil
}

func protoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	case 132:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}
