package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
	"github.com/flowlens/flowlens/internal/shared/textfmt"
	"github.com/flowlens/flowlens/internal/shared/version"
	"github.com/flowlens/flowlens/pkg/flow"
)

// options is observe's configuration, filled in by observeSpec.Load.
type options struct {
	servers    []string
	kubeconfig string
	kubeCtx    string
	namespace  string // of the collector pods
	tlsCA      string
	tlsCert    string
	tlsKey     string
	serverName string
	token      string
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

	// While the flags are applied, in command-line order: the positive
	// filter (nil until a filter flag), --not waiting for its filter flag,
	// and the filter flags given positively.
	pos    *flowv1.FlowFilter
	negate bool
	used   map[string]bool
	// flowlens ui: where it serves the page, and whether it opens the
	// browser.
	uiListen  string
	noBrowser bool
	// flowlens capture's own settings.
	capture captureOptions

	// defaulted is false while the defaults are applied, true from then on
	// (observeSpec.Init): an empty filter then is an error.
	defaulted bool
}

// setting is a row of observe's table that is not a filter: --not must not
// come before it, and an empty default leaves it unset (--last, --since:
// "" is no value for them).
func setting(o *cliconf.Option[options]) *cliconf.Option[options] {
	set := o.Set
	o.Set = func(opts *options, v string) error {
		if !opts.defaulted && v == "" {
			return nil // the empty default: unset
		}
		if opts.negate {
			return cliconf.AsIs(fmt.Errorf("--not must be followed by a filter flag, not --%s", o.Name))
		}
		return set(opts, v)
	}
	return o
}

// filter is a filter flag's row: each occurrence, in command-line order,
// adds its values to the positive FlowFilter (AND across flags, OR within
// one), or to a FlowFilter of its own after --not.
func filter(name, arg, usage string, add func(ff *flowv1.FlowFilter, items []string) error) *cliconf.Option[options] {
	return &cliconf.Option[options]{Name: name, Arg: arg, Usage: usage,
		SetList: func(o *options, items []string) error {
			if len(items) == 0 {
				if !o.defaulted {
					return nil // the empty default: no filter
				}
				return errors.New("needs at least one value")
			}
			ff, err := o.filterFor(name)
			if err != nil {
				return err
			}
			return add(ff, items)
		}}
}

// filterFor is the FlowFilter the filter flag name adds to.
func (o *options) filterFor(name string) (*flowv1.FlowFilter, error) {
	if o.negate {
		o.negate = false
		ff := &flowv1.FlowFilter{Not: true}
		o.filters = append(o.filters, ff)
		return ff, nil
	}
	if name == "rtt-above" && o.used[name] {
		return nil, cliconf.AsIs(errors.New("--rtt-above given twice: give it once"))
	}
	if o.used == nil {
		o.used = map[string]bool{}
	}
	o.used[name] = true
	if o.pos == nil {
		o.pos = &flowv1.FlowFilter{}
	}
	return o.pos, nil
}

// observeFlags is observe's options table (docs/observe.md describes each),
// grouped as the help lists them. Filter flags are applied in command-line
// order, so that --not negates the next one.
var observeFlags = slices.Concat(
	cliconf.InSection("Collectors", []*cliconf.Option[options]{
		setting(&cliconf.Option[options]{Name: "server", Arg: "host:port", Usage: "collector to ask (repeatable or comma list: several are merged by time); without it, every collector pod of the cluster through a port-forward",
			Set: func(o *options, v string) error {
				for _, s := range cliconf.SplitList(v) {
					if err := cliconf.CheckListenAddress("--server", s); err != nil || strings.HasPrefix(s, ":") {
						return cliconf.ItemError(s, errors.New("must be host:port, such as flowlens-collector.flowlens.svc:9990"))
					}
					o.servers = append(o.servers, s)
				}
				return nil
			}}),
		setting(&cliconf.Option[options]{Name: "kubeconfig", Arg: "file", Usage: "kubeconfig to find the collector pods with (default: $KUBECONFIG, ~/.kube/config)",
			Set: func(o *options, v string) error { o.kubeconfig = v; return nil }}),
		setting(&cliconf.Option[options]{Name: "context", Arg: "name", Usage: "kubeconfig context (default: the current one)",
			Set: func(o *options, v string) error { o.kubeCtx = v; return nil }}),
		setting(&cliconf.Option[options]{Name: "collector-namespace", Short: "n", Arg: "namespace", Default: "flowlens", Usage: "namespace of the collector pods (label app.kubernetes.io/name=flowlens-collector)",
			Set: func(o *options, v string) error { o.namespace = v; return nil }}),
	}, settings(collectorTLS.Options()), []*cliconf.Option[options]{
		setting(&cliconf.Option[options]{Name: "token", Arg: "token", Usage: "bearer token for collectors that authorize readers (--auth kubernetes: its user needs get on flowcollectors/flows in API group flowlens.io), sent only over TLS (default: the kubeconfig's, when the collectors are found with it); better set in FLOWLENS_OBSERVE_TOKEN than on a command line",
			Set: func(o *options, v string) error { o.token = v; return nil }}),
		setting(&cliconf.Option[options]{Name: "tls-server-name", Arg: "name", Usage: "name to verify the collector's certificate against (default: the host of --server; through a port-forward: flowlens-collector.<namespace>.svc)",
			Set: func(o *options, v string) error { o.serverName = v; return nil }}),
	}),
	cliconf.InSection("Output", []*cliconf.Option[options]{
		setting(&cliconf.Option[options]{Name: "output", Short: "o", Arg: "format", Default: "table", Usage: "table, compact (one line per flow), json (the collector's JSON lines) or jsonpb (protobuf JSON of HistoryFlow)",
			Set: func(o *options, v string) error {
				switch v {
				case "table", "compact", "json", "jsonpb":
					o.output = v
					return nil
				}
				return errors.New("must be table, compact, json or jsonpb")
			}}),
		setting(&cliconf.Option[options]{Name: "follow", Short: "f", Arg: "bool", Default: "false", Bool: true, Usage: "after the history, print new flows as they arrive until interrupted",
			Set: func(o *options, v string) (err error) { o.follow, err = parseBool(v); return err }}),
		setting(&cliconf.Option[options]{Name: "reorder-window", Arg: "duration", Default: defaultReorderWindow.String(), Usage: "with --follow and several collectors: how long a new flow waits at most for the other collectors, so that flows print in end-time order (0: no wait); above the agents' --cache-active-timeout for a strict order",
			Set: func(o *options, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 {
					return errors.New("must be a duration such as 2s or 500ms (0: no waiting)")
				}
				o.reorderWindow = d
				return nil
			}}),
		setting(&cliconf.Option[options]{Name: "last", Arg: "N", Usage: "only the last N matching flows of the history (default 20, or all with --since; with --follow, none without --since)",
			Set: func(o *options, v string) (err error) {
				o.last, err = strconv.ParseUint(v, 10, 64)
				if err != nil {
					return errors.New("must be a number of flows (0: all)")
				}
				o.lastSet = true
				return nil
			}}),
		setting(&cliconf.Option[options]{Name: "since", Arg: "time", Usage: "only flows that ended at or after this: a duration ago (5m, 1h30m) or an RFC 3339 time",
			Set: func(o *options, v string) (err error) { o.since, err = parseTime(v); return err }}),
		setting(&cliconf.Option[options]{Name: "until", Arg: "time", Usage: "only flows that ended at or before this: a duration ago or an RFC 3339 time",
			Set: func(o *options, v string) (err error) { o.until, err = parseTime(v); return err }}),
	}),
	cliconf.InSection("Filters", []*cliconf.Option[options]{
		{Name: "not", Arg: "", Default: "false", Bool: true, Usage: "negate the next filter flag: --not --namespace kube-system",
			Set: func(o *options, v string) error {
				if b, err := parseBool(v); err != nil || !b {
					return err
				}
				if o.negate {
					return cliconf.AsIs(errors.New("--not --not: --not negates the next filter flag"))
				}
				o.negate = true
				return nil
			}},
		filter("namespace", "list", "src or dst pod or Service in one of these namespaces",
			func(ff *flowv1.FlowFilter, v []string) error { ff.Namespace = append(ff.Namespace, v...); return nil }),
		filter("pod", "list", "src or dst pod: name or namespace/name",
			func(ff *flowv1.FlowFilter, v []string) error { ff.Pod = append(ff.Pod, v...); return nil }),
		filter("workload", "list", "src or dst workload (Deployment, StatefulSet, DaemonSet, Service...): name or namespace/name",
			func(ff *flowv1.FlowFilter, v []string) error { ff.Workload = append(ff.Workload, v...); return nil }),
		filter("node", "list", "observed by the agent of one of these nodes",
			func(ff *flowv1.FlowFilter, v []string) error { ff.Node = append(ff.Node, v...); return nil }),
		filter("ip", "list", "src or dst address in one of these CIDRs or addresses",
			cidrs(func(ff *flowv1.FlowFilter) *[]string { return &ff.Ip })),
		filter("from-ip", "list", "src address in one of these CIDRs or addresses",
			cidrs(func(ff *flowv1.FlowFilter) *[]string { return &ff.FromIp })),
		filter("to-ip", "list", "dst address in one of these CIDRs or addresses",
			cidrs(func(ff *flowv1.FlowFilter) *[]string { return &ff.ToIp })),
		filter("port", "list", "src or dst port one of these",
			ports(func(ff *flowv1.FlowFilter) *[]uint32 { return &ff.Port })),
		filter("from-port", "list", "src port one of these",
			ports(func(ff *flowv1.FlowFilter) *[]uint32 { return &ff.FromPort })),
		filter("to-port", "list", "dst port one of these",
			ports(func(ff *flowv1.FlowFilter) *[]uint32 { return &ff.ToPort })),
		filter("protocol", "list", "IP protocol: tcp, udp, icmp, icmpv6, sctp, gre, esp or a number",
			func(ff *flowv1.FlowFilter, v []string) error {
				for _, s := range v {
					n, err := textfmt.ParseProtocol(s)
					if err != nil {
						return cliconf.ItemError(s, err)
					}
					ff.Protocol = append(ff.Protocol, uint32(n))
				}
				return nil
			}),
		boolean(filter("drops", "bool", "flows with dropped packets",
			func(ff *flowv1.FlowFilter, v []string) (err error) { ff.Drops, err = parseBool(v[0]); return err })),
		filter("drop-cause", "list", "flows with packets dropped for one of these kernel drop reasons (NETFILTER_DROP, NO_SOCKET...)",
			func(ff *flowv1.FlowFilter, v []string) error {
				for _, s := range v {
					if s == "" || strings.ContainsFunc(s, func(r rune) bool {
						return !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
					}) {
						return cliconf.ItemError(s, errors.New("must be a kernel drop reason name such as NETFILTER_DROP"))
					}
				}
				ff.DropCause = append(ff.DropCause, v...)
				return nil
			}),
		filter("tcp-flags", "list", "TCP flows with all the flags of one of these: SYN, SYN|ACK, RST... (FIN SYN RST PSH ACK URG ECE CWR SYN_ACK FIN_ACK RST_ACK)",
			func(ff *flowv1.FlowFilter, v []string) error {
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
			}),
		filter("rtt-above", "duration", "flows whose largest TCP RTT in the period is above this (10ms)",
			func(ff *flowv1.FlowFilter, v []string) error {
				if len(v) != 1 {
					return errors.New("takes one duration")
				}
				d, err := time.ParseDuration(v[0])
				if err != nil || d < 0 {
					return errors.New("must be a duration such as 10ms or 1.5s")
				}
				ff.RttAbove = durationpb.New(d)
				return nil
			}),
		filter("dns-rcode", "list", "flows with a DNS answer of one of these response codes: NOERROR, NXDOMAIN, SERVFAIL... or a number",
			func(ff *flowv1.FlowFilter, v []string) error {
				for _, s := range v {
					c, ok := rcode(s)
					if !ok {
						return cliconf.ItemError(s, errors.New("must be a DNS response code: NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED... or a number from 0 to 15"))
					}
					ff.DnsRcode = append(ff.DnsRcode, c)
				}
				return nil
			}),
		boolean(filter("tcp-failed", "bool", "flows whose source had TCP connects refused or timed out in the period (tcp_refused + tcp_timeouts > 0)",
			func(ff *flowv1.FlowFilter, v []string) (err error) { ff.TcpFailed, err = parseBool(v[0]); return err })),
		filter("tcp-result", "list", "flows whose source had TCP connects with one of these results in the period: "+strings.Join(flowquery.TCPResults, ", "),
			func(ff *flowv1.FlowFilter, v []string) error {
				for _, s := range v {
					if !slices.Contains(flowquery.TCPResults, s) {
						return cliconf.ItemError(s, errors.New("must be one of "+strings.Join(flowquery.TCPResults, ", ")))
					}
				}
				ff.TcpResult = append(ff.TcpResult, v...)
				return nil
			}),
	}),
)

// collectorTLS is the client's TLS to the collectors, a group written once
// (package cliconf).
var collectorTLS = cliconf.ClientTLS[options]{Peer: "collector", CAUsage: " (when it serves TLS: its --tls-cert)",
	CA:   func(o *options) *string { return &o.tlsCA },
	Cert: func(o *options) *string { return &o.tlsCert },
	Key:  func(o *options) *string { return &o.tlsKey }}

// observeSpec is observe's configuration: flags, FLOWLENS_OBSERVE_<NAME>
// variables and a YAML file (--config), as every flowlens program's.
var observeSpec = &cliconf.Spec[options]{
	Program: "flowlens observe",
	Summary: "Prints flows of flowlens collectors' history (and with --follow, new ones), filtered in the collector. " +
		"Filters combine with AND across flags and OR within one flag (repeat it or give a comma list); " +
		"--not negates the next filter flag. See docs/observe.md.",
	EnvPrefix: "FLOWLENS_OBSERVE_",
	Options:   observeFlags,
	Init:      func(o *options, _ func(string) string) { o.defaulted = true },
	Validate:  func(o *options) error { return o.validate(nowFunc()) },
}

// settings are rows that are not filters (see setting).
func settings(rows []*cliconf.Option[options]) []*cliconf.Option[options] {
	for _, r := range rows {
		setting(r)
	}
	return rows
}

// boolean makes a filter row a flag given without a value (--drops).
func boolean(o *cliconf.Option[options]) *cliconf.Option[options] {
	o.Bool, o.Default = true, "false"
	return o
}

// validate ends the command line's filters, checks them as the server
// will (naming the flag), then the settings' combinations.
func (o *options) validate(now time.Time) error {
	if o.negate {
		return errors.New("--not must be followed by a filter flag")
	}
	if o.pos != nil && proto.Size(o.pos) > 0 {
		o.filters = append([]*flowv1.FlowFilter{o.pos}, o.filters...)
	}
	if _, err := flowquery.Compile(o.filters); err != nil {
		return err
	}
	errs := []error{collectorTLS.Check(o), cliconf.CheckFile("--kubeconfig", o.kubeconfig)}
	if !o.since.IsZero() && !o.until.IsZero() && o.until.Before(o.since) {
		errs = append(errs, fmt.Errorf("--until %s is before --since %s", o.until.Format(time.RFC3339), o.since.Format(time.RFC3339)))
	}
	if o.follow && !o.until.IsZero() {
		errs = append(errs, errors.New("--until and --follow: choose one (followed flows have not ended yet)"))
	}
	if len(o.servers) > 0 && (o.kubeconfig != "" || o.kubeCtx != "") {
		errs = append(errs, errors.New("--server and --kubeconfig/--context: choose one"))
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

// loadOptions reads a subcommand's options (cliconf: flags, then its
// FLOWLENS_<CMD>_* variables, then its file). done says the command ends
// here with code: --help or --version printed (0), a bad option (2).
func loadOptions(spec *cliconf.Spec[options], cmd string, args []string, env func(string) string, stdout, stderr io.Writer) (o *options, code int, done bool) {
	o, err := spec.Load(args, env)
	switch {
	case errors.Is(err, flag.ErrHelp):
		spec.Usage(stdout)
		return nil, 0, true
	case errors.Is(err, cliconf.ErrVersion):
		fmt.Fprintln(stdout, version.String("flowlens"))
		return nil, 0, true
	case err != nil:
		fmt.Fprintf(stderr, "flowlens %s: %v\n", cmd, err)
		return nil, 2, true
	}
	return o, 0, false
}
