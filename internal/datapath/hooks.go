package datapath

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Enrichment hook names (the --features values and the hook metric label).
const (
	HookDrops       = "drops"
	HookRTT         = "rtt"
	HookRetransmits = "retransmits"
)

// A candidate is one way to run a hook: a program of bpf/enrich.c and how to
// attach it. A hook tries its candidates in order and keeps the first that
// loads and attaches, so each hook has the same shape: preferred program,
// then fallbacks.
type candidate struct {
	prog   string
	attach func(*ebpf.Program) (link.Link, error)
}

func tracing(p *ebpf.Program) (link.Link, error) {
	return link.AttachTracing(link.TracingOptions{Program: p})
}

func tracepoint(group, name string) func(*ebpf.Program) (link.Link, error) {
	return func(p *ebpf.Program) (link.Link, error) { return link.Tracepoint(group, name, p, nil) }
}

// hookCandidates registers every enrichment hook in one place.
var hookCandidates = map[string][]candidate{
	HookDrops: {
		{EnrichProgDropKfreeSkb, tracing},                          // tp_btf/kfree_skb
		{EnrichProgDropTracepoint, tracepoint("skb", "kfree_skb")}, // needs tracefs
	},
	HookRTT: {
		{EnrichProgRttFentry, tracing},   // fentry/tcp_rcv_established
		{EnrichProgRttTcpProbe, tracing}, // tp_btf/tcp_probe
	},
	HookRetransmits: {
		{EnrichProgRetransmit, tracing}, // tp_btf/tcp_retransmit_skb
	},
}

// HookStatus says how an enrichment hook runs, or why it does not.
type HookStatus struct {
	Name    string
	Running bool
	Program string // the candidate that runs, e.g. "rtt_tcp_probe"
	// Err is why the hook is not running, with each candidate's failure.
	Err error
}

type hook struct {
	status HookStatus
	prog   *ebpf.Program
	link   link.Link
	// counters is the hooks' shared enrich_counters map (each hook holds
	// its own handle, so the map lives as long as any hook).
	counters *ebpf.Map
}

// StartHooks loads and attaches the named enrichment hooks (HookDrops, ...).
// A hook the kernel refuses is reported in its status; the others run. It
// returns the status of every requested hook.
func (d *Datapath) StartHooks(names []string) []HookStatus {
	kernel, kerr := btf.LoadKernelSpec()
	spec := d.enrichSpec.Copy()
	if kerr == nil {
		consumed, notSpecified := dropReasonValue(kernel, "SKB_CONSUMED", 1), dropReasonValue(kernel, "SKB_DROP_REASON_NOT_SPECIFIED", 2)
		_ = spec.Variables[EnrichVarReasonConsumed].Set(consumed)
		_ = spec.Variables[EnrichVarReasonNotSpecified].Set(notSpecified)
	}
	counters, cerr := d.enrichCounters(spec)
	if counters != nil {
		defer counters.Close()
	}
	var out []HookStatus
	for _, name := range names {
		h := &hook{status: HookStatus{Name: name}}
		cands, ok := hookCandidates[name]
		switch {
		case !ok:
			h.status.Err = fmt.Errorf("unknown hook %q", name)
		case cerr != nil:
			h.status.Err, cands = cerr, nil
		default:
			var err error
			if h.counters, err = counters.Clone(); err != nil {
				h.status.Err, cands = err, nil
			}
		}
		var errs []error
		for _, c := range cands {
			if slices.Contains(d.cfg.SkipHookPrograms, c.prog) {
				errs = append(errs, fmt.Errorf("%s: skipped by configuration", c.prog))
				continue
			}
			prog, l, err := d.loadHook(spec, c, counters)
			if err == nil {
				h.prog, h.link = prog, l
				h.status.Running, h.status.Program = true, c.prog
				errs = nil
				break
			}
			errs = append(errs, fmt.Errorf("%s: %w", c.prog, err))
		}
		if !h.status.Running && h.status.Err == nil {
			h.status.Err = errors.Join(errs...)
		}
		d.hooks = append(d.hooks, h)
		out = append(out, h.status)
	}
	return out
}

// enrichCounters returns a new handle to the hooks' counters map: the one
// the running hooks share, or a new map for the first StartHooks.
func (d *Datapath) enrichCounters(spec *ebpf.CollectionSpec) (*ebpf.Map, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hooks {
		if h.counters != nil {
			return h.counters.Clone()
		}
	}
	m, err := ebpf.NewMap(spec.Maps[EnrichMapEnrichCounters])
	if err != nil {
		return nil, fmt.Errorf("create map %s: %w", EnrichMapEnrichCounters, err)
	}
	return m, nil
}

// loadHook loads one program of the enrichment object alone (so one refused
// program does not take the others down) and attaches it.
func (d *Datapath) loadHook(spec *ebpf.CollectionSpec, c candidate, counters *ebpf.Map) (*ebpf.Program, link.Link, error) {
	one := spec.Copy()
	for name := range one.Programs {
		if name != c.prog {
			delete(one.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		EnrichMapControl:        d.Maps.Control,
		EnrichMapEnrichA:        d.Maps.Enrich[0],
		EnrichMapEnrichB:        d.Maps.Enrich[1],
		EnrichMapEnrichCounters: counters,
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("load: %w", err)
	}
	prog := coll.DetachProgram(c.prog)
	coll.Close()
	l, err := c.attach(prog)
	if err != nil {
		prog.Close()
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	return prog, l, nil
}

// Hooks returns the status of every hook StartHooks was asked for.
func (d *Datapath) Hooks() []HookStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]HookStatus, len(d.hooks))
	for i, h := range d.hooks {
		out[i] = h.status
	}
	return out
}

// HookPrograms returns the running enrichment programs by hook name.
func (d *Datapath) HookPrograms() map[string]*ebpf.Program {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]*ebpf.Program{}
	for _, h := range d.hooks {
		if h.prog != nil {
			out[h.status.Program] = h.prog
		}
	}
	return out
}

// StopHooks detaches the enrichment hooks (shutdown: before the final eviction).
func (d *Datapath) StopHooks() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hooks {
		if h.link != nil {
			h.link.Close()
			h.link = nil
		}
	}
}

func (d *Datapath) closeHooks() {
	d.StopHooks()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hooks {
		if h.prog != nil {
			h.prog.Close()
		}
		if h.counters != nil {
			h.counters.Close()
		}
	}
	d.hooks = nil
}

func dropReasonValue(kernel *btf.Spec, name string, def uint32) uint32 {
	var e *btf.Enum
	if err := kernel.TypeByName("skb_drop_reason", &e); err != nil {
		return def
	}
	for _, v := range e.Values {
		if v.Name == name {
			return uint32(v.Value)
		}
	}
	return def
}

// Names resolves kernel enum values to names, from the running kernel's BTF:
// drop reasons (enum skb_drop_reason: "NO_SOCKET", "NETFILTER_DROP", ...) and
// TCP states ("ESTABLISHED", ...). The values differ between kernel versions,
// so no table is compiled in.
type Names struct {
	dropReasons map[uint32]string
	tcpStates   map[uint8]string
}

// LoadNames reads the names from the kernel's BTF.
func LoadNames() (*Names, error) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("kernel BTF: %w", err)
	}
	n := &Names{dropReasons: map[uint32]string{}, tcpStates: map[uint8]string{}}
	var e *btf.Enum
	if err := kernel.TypeByName("skb_drop_reason", &e); err == nil {
		for _, v := range e.Values {
			name := strings.TrimPrefix(strings.TrimPrefix(v.Name, "SKB_DROP_REASON_"), "SKB_")
			n.dropReasons[uint32(v.Value)] = name
		}
	}
	// The TCP states are an anonymous enum: find the one holding TCP_ESTABLISHED.
	for typ, err := range kernel.All() {
		if err != nil {
			break
		}
		en, ok := typ.(*btf.Enum)
		if !ok || en.Name != "" || !hasValue(en, "TCP_ESTABLISHED") {
			continue
		}
		for _, v := range en.Values {
			n.tcpStates[uint8(v.Value)] = strings.TrimPrefix(v.Name, "TCP_")
		}
		break
	}
	return n, nil
}

func hasValue(e *btf.Enum, name string) bool {
	for _, v := range e.Values {
		if v.Name == name {
			return true
		}
	}
	return false
}

// DropReason returns the name of a drop reason, or its number if unknown.
func (n *Names) DropReason(v uint32) string {
	if s, ok := n.dropReasons[v]; ok {
		return s
	}
	return fmt.Sprintf("REASON_%d", v)
}

// TCPState returns the name of a TCP state ("" for 0: not a TCP socket).
func (n *Names) TCPState(v uint8) string {
	if v == 0 {
		return ""
	}
	if s, ok := n.tcpStates[v]; ok {
		return s
	}
	return fmt.Sprintf("STATE_%d", v)
}
