package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
	"github.com/flowlens/flowlens/internal/shared/textfmt"
	"github.com/flowlens/flowlens/pkg/flow"
)

// options is observe's configuration, filled in by parseObserve.
type options struct {
	servers    []string
	kubeconfig string
	kubeCtx    string
	namespace  string // of the collector pods
	tlsCA      string
	tlsCert    string
	tlsKey     string
	serverName string
	output     string
	follow     bool
	// reorderWindow: how long a followed flow waits at most for the other
	// collectors (merger).
	reorderWindow time.Duration
	last          uint64
	lastSet       bool
	since         time.Time
	until         time.Time
	// filters: the positive filters in one FlowFilter (AND across flags,
	// OR within one), then one FlowFilter per negated flag.
	filters []*flowv1.FlowFilter
}

// flagDef is one flag of observe: a filter flag adds to a FlowFilter (the
// positive one, or a negated one after --not), an option sets options.
type flagDef struct {
	name, short, arg, usage string
	boolean                 bool
	filter                  func(ff *flowv1.FlowFilter, items []string) error // a filter flag
	set                     func(o *options, v string) error                  // an option
	def                     string
}

// observeFlags is the flag table (docs/observe.md describes each).
var observeFlags = []*flagDef{
	{name: "server", arg: "host:port", usage: "collector to ask (repeatable or comma list: several are merged by time); without it, every collector pod of the cluster through a port-forward",
		set: func(o *options, v string) error {
			for _, s := range split(v) {
				if err := cliconf.CheckListenAddress("--server", s); err != nil || strings.HasPrefix(s, ":") {
					return cliconf.ItemError(s, errors.New("must be host:port, such as flowlens-collector.flowlens.svc:9990"))
				}
				o.servers = append(o.servers, s)
			}
			return nil
		}},
	{name: "kubeconfig", arg: "file", usage: "kubeconfig to find the collector pods with (default: $KUBECONFIG, ~/.kube/config)",
		set: func(o *options, v string) error { o.kubeconfig = v; return nil }},
	{name: "context", arg: "name", usage: "kubeconfig context (default: the current one)",
		set: func(o *options, v string) error { o.kubeCtx = v; return nil }},
	{name: "collector-namespace", short: "n", arg: "namespace", def: "flowlens", usage: "namespace of the collector pods (label app.kubernetes.io/name=flowlens-collector)",
		set: func(o *options, v string) error { o.namespace = v; return nil }},
	{name: "tls-ca", arg: "file", usage: "CA certificate to verify the collector (serve TLS: the collector's --tls-cert)",
		set: func(o *options, v string) error { o.tlsCA = v; return nil }},
	{name: "tls-cert", arg: "file", usage: "client certificate (mTLS: the collector's --tls-client-ca); needs --tls-key",
		set: func(o *options, v string) error { o.tlsCert = v; return nil }},
	{name: "tls-key", arg: "file", usage: "client key; needs --tls-cert",
		set: func(o *options, v string) error { o.tlsKey = v; return nil }},
	{name: "tls-server-name", arg: "name", usage: "name to verify the collector's certificate against (default: the host of --server; through a port-forward: flowlens-collector.<namespace>.svc)",
		set: func(o *options, v string) error { o.serverName = v; return nil }},
	{name: "output", short: "o", arg: "format", def: "table", usage: "table, compact (one line per flow), json (the collector's JSON lines) or jsonpb (protobuf JSON of HistoryFlow)",
		set: func(o *options, v string) error {
			switch v {
			case "table", "compact", "json", "jsonpb":
				o.output = v
				return nil
			}
			return errors.New("must be table, compact, json or jsonpb")
		}},
	{name: "follow", short: "f", boolean: true, usage: "after the history, print new flows as they arrive until interrupted",
		set: func(o *options, v string) (err error) { o.follow, err = parseBool(v); return err }},
	{name: "reorder-window", arg: "duration", def: defaultReorderWindow.String(), usage: "with --follow and several collectors: how long a new flow waits at most for the other collectors, so that flows print in end-time order (0: no wait); above the agents' --cache-active-timeout for a strict order",
		set: func(o *options, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return errors.New("must be a duration such as 2s or 500ms (0: no waiting)")
			}
			o.reorderWindow = d
			return nil
		}},
	{name: "last", arg: "N", usage: "only the last N matching flows of the history (default 20, or all with --since; with --follow, none without --since)",
		set: func(o *options, v string) (err error) {
			o.last, err = strconv.ParseUint(v, 10, 64)
			if err != nil {
				return errors.New("must be a number of flows (0: all)")
			}
			o.lastSet = true
			return nil
		}},
	{name: "since", arg: "time", usage: "only flows that ended at or after this: a duration ago (5m, 1h30m) or an RFC 3339 time",
		set: func(o *options, v string) (err error) { o.since, err = parseTime(v); return err }},
	{name: "until", arg: "time", usage: "only flows that ended at or before this: a duration ago or an RFC 3339 time",
		set: func(o *options, v string) (err error) { o.until, err = parseTime(v); return err }},

	{name: "not", boolean: true, usage: "negate the next filter flag: --not --namespace kube-system"},
	{name: "namespace", arg: "list", usage: "src or dst pod or Service in one of these namespaces",
		filter: func(ff *flowv1.FlowFilter, v []string) error { ff.Namespace = append(ff.Namespace, v...); return nil }},
	{name: "pod", arg: "list", usage: "src or dst pod: name or namespace/name",
		filter: func(ff *flowv1.FlowFilter, v []string) error { ff.Pod = append(ff.Pod, v...); return nil }},
	{name: "workload", arg: "list", usage: "src or dst workload (Deployment, StatefulSet, DaemonSet, Service...): name or namespace/name",
		filter: func(ff *flowv1.FlowFilter, v []string) error { ff.Workload = append(ff.Workload, v...); return nil }},
	{name: "node", arg: "list", usage: "observed by the agent of one of these nodes",
		filter: func(ff *flowv1.FlowFilter, v []string) error { ff.Node = append(ff.Node, v...); return nil }},
	{name: "ip", arg: "list", usage: "src or dst address in one of these CIDRs or addresses",
		filter: cidrs(func(ff *flowv1.FlowFilter) *[]string { return &ff.Ip })},
	{name: "from-ip", arg: "list", usage: "src address in one of these CIDRs or addresses",
		filter: cidrs(func(ff *flowv1.FlowFilter) *[]string { return &ff.FromIp })},
	{name: "to-ip", arg: "list", usage: "dst address in one of these CIDRs or addresses",
		filter: cidrs(func(ff *flowv1.FlowFilter) *[]string { return &ff.ToIp })},
	{name: "port", arg: "list", usage: "src or dst port one of these",
		filter: ports(func(ff *flowv1.FlowFilter) *[]uint32 { return &ff.Port })},
	{name: "from-port", arg: "list", usage: "src port one of these",
		filter: ports(func(ff *flowv1.FlowFilter) *[]uint32 { return &ff.FromPort })},
	{name: "to-port", arg: "list", usage: "dst port one of these",
		filter: ports(func(ff *flowv1.FlowFilter) *[]uint32 { return &ff.ToPort })},
	{name: "protocol", arg: "list", usage: "IP protocol: tcp, udp, icmp, icmpv6, sctp, gre, esp or a number",
		filter: func(ff *flowv1.FlowFilter, v []string) error {
			for _, s := range v {
				n, ok := textfmt.Protocols[strings.ToLower(s)]
				if !ok {
					p, err := strconv.ParseUint(s, 10, 8)
					if err != nil {
						return cliconf.ItemError(s, errors.New("must be tcp, udp, icmp, icmpv6, sctp, gre, esp or a protocol number from 0 to 255"))
					}
					n = uint8(p)
				}
				ff.Protocol = append(ff.Protocol, uint32(n))
			}
			return nil
		}},
	{name: "drops", boolean: true, usage: "flows with dropped packets",
		filter: func(ff *flowv1.FlowFilter, v []string) (err error) { ff.Drops, err = parseBool(v[0]); return err }},
	{name: "drop-cause", arg: "list", usage: "flows with packets dropped for one of these kernel drop reasons (NETFILTER_DROP, NO_SOCKET...)",
		filter: func(ff *flowv1.FlowFilter, v []string) error {
			for _, s := range v {
				if s == "" || strings.ContainsFunc(s, func(r rune) bool {
					return !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
				}) {
					return cliconf.ItemError(s, errors.New("must be a kernel drop reason name such as NETFILTER_DROP"))
				}
			}
			ff.DropCause = append(ff.DropCause, v...)
			return nil
		}},
	{name: "tcp-flags", arg: "list", usage: "TCP flows with all the flags of one of these: SYN, SYN|ACK, RST... (FIN SYN RST PSH ACK URG ECE CWR SYN_ACK FIN_ACK RST_ACK)",
		filter: func(ff *flowv1.FlowFilter, v []string) error {
			for _, s := range v {
				var mask uint32
				for _, name := range strings.Split(s, "|") {
					bit := uint16(0)
					for _, f := range textfmt.TCPFlags {
						if strings.EqualFold(f.Name, strings.TrimSpace(name)) {
							bit = f.Bit
						}
					}
					if bit == 0 {
						return cliconf.ItemError(s, errors.New("must be TCP flag names joined with |: FIN, SYN, RST, PSH, ACK, URG, ECE, CWR, SYN_ACK, FIN_ACK, RST_ACK"))
					}
					mask |= uint32(bit)
				}
				ff.TcpFlags = append(ff.TcpFlags, mask)
			}
			return nil
		}},
	{name: "rtt-above", arg: "duration", usage: "flows whose largest TCP RTT in the period is above this (10ms)",
		filter: func(ff *flowv1.FlowFilter, v []string) error {
			if len(v) != 1 {
				return errors.New("takes one duration")
			}
			d, err := time.ParseDuration(v[0])
			if err != nil || d < 0 {
				return errors.New("must be a duration such as 10ms or 1.5s")
			}
			ff.RttAbove = durationpb.New(d)
			return nil
		}},
	{name: "dns-rcode", arg: "list", usage: "flows with a DNS answer of one of these response codes: NOERROR, NXDOMAIN, SERVFAIL... or a number",
		filter: func(ff *flowv1.FlowFilter, v []string) error {
			for _, s := range v {
				c, ok := rcode(s)
				if !ok {
					return cliconf.ItemError(s, errors.New("must be a DNS response code: NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED... or a number from 0 to 15"))
				}
				ff.DnsRcode = append(ff.DnsRcode, c)
			}
			return nil
		}},
}

// parseObserve reads observe's arguments. --help returns errHelp.
func parseObserve(args []string, now time.Time) (*options, error) {
	o := &options{namespace: "flowlens", output: "table", reorderWindow: defaultReorderWindow}
	pos := &flowv1.FlowFilter{}
	used := map[string]bool{}
	negate := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-h" || a == "--help" || a == "-help" {
			return nil, errHelp
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name == "" {
			return nil, fmt.Errorf("unexpected argument %q: observe takes only flags (--help lists them)", a)
		}
		d := lookup(name, strings.HasPrefix(a, "--"))
		if d == nil {
			return nil, fmt.Errorf("unknown flag %s (--help lists them)", a)
		}
		key := "--" + d.name
		if !d.boolean && !hasValue {
			if i+1 == len(args) {
				return nil, fmt.Errorf("%s needs a value (%s)", key, d.arg)
			}
			i++
			value = args[i]
		} else if d.boolean && !hasValue {
			value = "true"
		}
		if d.name == "not" {
			if negate {
				return nil, errors.New("--not --not: --not negates the next filter flag")
			}
			negate = true
			continue
		}
		if d.filter == nil {
			if negate {
				return nil, fmt.Errorf("--not must be followed by a filter flag, not %s", key)
			}
			if err := d.set(o, value); err != nil {
				return nil, cliconf.Invalid(key, value, err)
			}
			continue
		}
		ff := pos
		if negate {
			ff = &flowv1.FlowFilter{Not: true}
			o.filters = append(o.filters, ff)
			negate = false
		} else if d.name == "rtt-above" && used[d.name] {
			return nil, fmt.Errorf("--rtt-above given twice: give it once")
		}
		used[d.name] = true
		items := split(value)
		if d.boolean {
			items = []string{value}
		}
		if len(items) == 0 {
			return nil, cliconf.Invalid(key, value, errors.New("needs at least one value"))
		}
		if err := d.filter(ff, items); err != nil {
			return nil, cliconf.Invalid(key, value, err)
		}
	}
	if negate {
		return nil, errors.New("--not must be followed by a filter flag")
	}
	if proto.Size(pos) > 0 {
		o.filters = append([]*flowv1.FlowFilter{pos}, o.filters...)
	}
	// The server checks the filters again; the same checks here name the flag.
	if _, err := flowquery.Compile(o.filters); err != nil {
		return nil, err
	}
	return o, o.validate(now)
}

func (o *options) validate(now time.Time) error {
	var errs []error
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key must be given together"))
	}
	if !o.since.IsZero() && !o.until.IsZero() && o.until.Before(o.since) {
		errs = append(errs, fmt.Errorf("--until %s is before --since %s", o.until.Format(time.RFC3339), o.since.Format(time.RFC3339)))
	}
	if o.follow && !o.until.IsZero() {
		errs = append(errs, errors.New("--until and --follow: choose one (followed flows have not ended yet)"))
	}
	if len(o.servers) > 0 && (o.kubeconfig != "" || o.kubeCtx != "") {
		errs = append(errs, errors.New("--server and --kubeconfig/--context: choose one"))
	}
	for _, f := range []struct{ flag, path string }{{"--tls-ca", o.tlsCA}, {"--tls-cert", o.tlsCert}, {"--tls-key", o.tlsKey}, {"--kubeconfig", o.kubeconfig}} {
		if f.path == "" {
			continue
		}
		if fi, err := os.Stat(f.path); err != nil {
			errs = append(errs, cliconf.Invalid(f.flag, f.path, cliconf.PathReason(err)))
		} else if fi.IsDir() {
			errs = append(errs, cliconf.Invalid(f.flag, f.path, errors.New("is a directory, not a file")))
		}
	}
	if !o.lastSet {
		switch {
		case !o.since.IsZero() || !o.until.IsZero():
			o.last = 0 // all within the times
		case o.follow:
		default:
			o.last = 20
		}
	}
	return errors.Join(errs...)
}

var errHelp = errors.New("help")

func lookup(name string, long bool) *flagDef {
	for _, d := range observeFlags {
		if long && d.name == name || !long && d.short == name || !long && d.name == name && len(name) > 1 {
			return d
		}
	}
	return nil
}

func split(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("must be true or false")
	}
	return b, nil
}

// parseTime is a duration ago or an RFC 3339 time.
func parseTime(v string) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return nowFunc().Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, errors.New("must be a duration ago such as 5m or an RFC 3339 time such as 2026-11-24T08:00:00Z")
}

// nowFunc is the clock of --since and --until.
var nowFunc = time.Now

func cidrs(field func(*flowv1.FlowFilter) *[]string) func(*flowv1.FlowFilter, []string) error {
	return func(ff *flowv1.FlowFilter, v []string) error {
		for _, s := range v {
			if _, err := flowquery.ParsePrefixes([]string{s}); err != nil {
				return cliconf.ItemError(s, errors.New("must be an IP address or CIDR, such as 10.0.0.1 or 10.0.0.0/8"))
			}
		}
		*field(ff) = append(*field(ff), v...)
		return nil
	}
}

func ports(field func(*flowv1.FlowFilter) *[]uint32) func(*flowv1.FlowFilter, []string) error {
	return func(ff *flowv1.FlowFilter, v []string) error {
		for _, s := range v {
			p, err := strconv.ParseUint(s, 10, 16)
			if err != nil {
				return cliconf.ItemError(s, errors.New("must be a port number from 0 to 65535"))
			}
			*field(ff) = append(*field(ff), uint32(p))
		}
		return nil
	}
}

func rcode(s string) (uint32, bool) {
	for c := range 16 {
		if strings.EqualFold(s, flow.DNSRcodeName(uint8(c))) {
			return uint32(c), true
		}
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil || n > 15 {
		return 0, false
	}
	return uint32(n), true
}

// printUsage writes observe's flags.
func printUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: flowlens observe [flags]\n\nPrints flows of flowlens collectors' history (and with --follow, new ones), filtered in the collector.\nFilters combine with AND across flags and OR within one flag (repeat it or give a comma list);\n--not negates the next filter flag. See docs/observe.md.\n\nFlags:\n")
	for _, d := range observeFlags {
		name := "--" + d.name
		if d.short != "" {
			name = "-" + d.short + ", " + name
		}
		if d.arg != "" {
			name += " " + d.arg
		}
		line := fmt.Sprintf("  %-38s %s", name, d.usage)
		if d.def != "" {
			line += fmt.Sprintf(" (default %s)", d.def)
		}
		fmt.Fprintln(w, line)
	}
}
