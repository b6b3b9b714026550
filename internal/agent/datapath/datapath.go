package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
)

// Config is what the datapath needs at load time.
type Config struct {
	MaxFlows  uint32 // entries of each flow map
	Sampling  uint32 // 1:N; 0 or 1 = every packet
	RingBytes uint32 // overflow ring buffer size; power of two multiple of the page size (default 1 MiB)

	ForceLegacyTC bool // attach with clsact + cls_bpf even where tcx exists
	// ForcePerNamespacePrograms loads one TC program set per network
	// namespace, the fallback, even where one shared set works (tests,
	// benchmarks).
	ForcePerNamespacePrograms bool
	// Enrichment sizes the enrichment maps to MaxFlows; without it they
	// get one entry each, so disabled hooks cost no memory.
	Enrichment bool
	// SkipHookPrograms names hook programs StartHooks must not try, so
	// tests can force a fallback (e.g. "drop_kfree_skb").
	SkipHookPrograms []string
	// EnrichUnwatched has the socket-side hooks (drops, RTT, retransmits)
	// record flows no watched interface carried (--enrich-unwatched); by
	// default they do not (bpf/enrich.h, watched).
	EnrichUnwatched bool
	// TCConstants are load-time constants of the TC programs set by the
	// features that run inside them (Plan.TC), by variable name.
	TCConstants map[string]any
	// MapSizes size the maps features need (Plan.MapSizes), by name.
	MapSizes map[string]uint32
	// FlowRules are the compiled flow rules, the kernel's flow filter (nil
	// or no rules: every packet is accounted, 1 in Sampling).
	FlowRules *flowrules.Table
	// BTF is the kernel's BTF, decoded once for the start (the features'
	// plans read it too): every program load of Load and StartHooks
	// relocates against it. StartHooks drops it, so the decoded types do
	// not stay in memory; later loads (the L3 pair, a namespace's set in
	// the fallback) decode their own. Nil: each load decodes its own.
	BTF    *btf.Cache
	Logger *slog.Logger
}

// Programs are one set of TC programs (feature "flows"): the ingress/egress
// pair for Ethernet devices, and the pair for devices without a link-layer
// header (tun, WireGuard, ipip, gre). One set serves every namespace, or,
// in the fallback, each namespace has its own (Datapath.SharedPrograms).
// The agent loads the L3 pair only when it attaches to such a device
// (IngressL3 and EgressL3 are nil until then): verifying it costs as much
// CPU as the Ethernet pair, at every start, and most nodes have none.
type Programs struct {
	Ingress   *ebpf.Program
	Egress    *ebpf.Program
	IngressL3 *ebpf.Program
	EgressL3  *ebpf.Program
}

// The names of Programs' two pairs, each loaded in one go.
var (
	ethPrograms = []string{ProgramIngress, ProgramEgress}
	l3Programs  = []string{ProgramIngressL3, ProgramEgressL3}
)

// Datapath is the loaded kernel side: the maps, the TC programs and the
// hooks of the enabled features. Close releases everything.
//
// The TC programs tell interfaces apart by (namespace cookie, ifindex).
// Where the kernel lets them read the device's namespace (skb->dev's
// net_cookie, bpf/flows.h), one set, loaded by Load, serves every
// namespace. Otherwise each namespace with an attached interface gets its
// own set, with its cookie as a load-time constant, released with the
// namespace's last interface.
type Datapath struct {
	cfg Config
	log *slog.Logger
	// spec is bpf/datapath.c with this datapath's sizes and constants,
	// but for the L3 pair, kept until ReleaseSpec (ownSpec parses it again
	// for what it lacks).
	spec atomic.Pointer[ebpf.CollectionSpec]
	btf  atomic.Pointer[btf.Cache] // Config.BTF until StartHooks ends
	Maps Maps
	// Clock converts the maps' timestamps (jiffies) to CLOCK_MONOTONIC.
	Clock *Clock

	mu       sync.Mutex
	hooks    []*hook
	shared   bool                 // one TC set for every namespace: progs[0]
	progs    map[uint64]*Programs // by netns cookie
	attached map[attachKey]*attachment
	watchers attachWatchers // OnAttach (beside.go)
}

// Load creates the maps and loads the TC programs.
func Load(cfg Config) (*Datapath, error) {
	if cfg.MaxFlows == 0 {
		return nil, errors.New("datapath: MaxFlows must be > 0")
	}
	if cfg.Sampling == 0 {
		cfg.Sampling = 1
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	spec, v4, err := newSpec(cfg)
	if err != nil {
		return nil, err
	}

	d := &Datapath{cfg: cfg, log: cfg.Logger,
		progs: map[uint64]*Programs{}, attached: map[attachKey]*attachment{}}
	// The L3 pair is loaded with the first device without a link-layer
	// header, on few nodes: its half of the object's instructions need not
	// be in the heap while the Ethernet pair verifies (the start's peak).
	// Its load parses the object again (ownSpec).
	for _, name := range l3Programs {
		delete(spec.Programs, name)
	}
	d.spec.Store(spec)
	d.btf.Store(cfg.BTF)
	d.cfg.BTF = nil
	if err := d.Maps.create(spec); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.Maps.writeFlowRules(cfg.FlowRules, v4, cfg.Sampling); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.Maps.SetSeveralDomains(false); err != nil { // and the defaults (zone.go)
		d.Close()
		return nil, fmt.Errorf("zones: %w", err)
	}
	// The clock reads tick edges, mostly asleep (newClock), while the TC
	// programs verify: it adds no CPU, and its 60 ms no longer add to the
	// start's wall time.
	clk, err := d.loadPrograms([]string{programClock}, nil)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("load the clock program: %w", err)
	}
	type clockResult struct {
		c   *Clock
		err error
	}
	clockDone := make(chan clockResult, 1)
	go func() {
		c, err := newClock(clk[programClock])
		clockDone <- clockResult{c, err}
	}()
	// Load the shared set (or the fallback's set for cookie 0) now: it
	// fails here, with the verifier's reason, rather than at the first
	// attach if the kernel refuses the programs; BPF_PROG_TEST_RUN and
	// benchmarks use it.
	d.shared = !cfg.ForcePerNamespacePrograms
	_, err = d.programsFor(0, false)
	if err != nil && d.shared {
		d.log.Warn("the TC programs cannot read the device's network namespace on this kernel: loading one set per namespace",
			"reason", err)
		d.shared = false
		_, err = d.programsFor(0, false)
	}
	cr := <-clockDone
	if cr.err != nil {
		clk[programClock].Close()
		err = errors.Join(err, cr.err)
	}
	d.Clock = cr.c
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// newSpec parses the embedded object and sets what cfg decides in it: the
// maps' sizes and the load-time constants. It reports whether the flow
// rules' IPv4 table (sizeFlowRules).
func newSpec(cfg Config) (*ebpf.CollectionSpec, []datapathFilterV4Entry, error) {
	spec, err := loadDatapath()
	if err != nil {
		return nil, nil, err
	}
	spec.Maps[datapathMapFlowsA].MaxEntries = cfg.MaxFlows
	spec.Maps[datapathMapFlowsB].MaxEntries = cfg.MaxFlows
	spec.Maps[datapathMapOverflow].MaxEntries = cfg.RingBytes
	enrichSize := uint32(1)
	if cfg.Enrichment {
		enrichSize = cfg.MaxFlows
	}
	spec.Maps[datapathMapEnrichA].MaxEntries = enrichSize
	spec.Maps[datapathMapEnrichB].MaxEntries = enrichSize
	if err := spec.Variables[datapathVarSampling].Set(cfg.Sampling); err != nil {
		return nil, nil, fmt.Errorf("set sampling: %w", err)
	}
	v4, err := sizeFlowRules(spec, cfg.FlowRules)
	if err != nil {
		return nil, nil, err
	}
	for name, n := range cfg.MapSizes {
		ms, ok := spec.Maps[name]
		if !ok {
			return nil, nil, fmt.Errorf("map %s: not in the BPF object", name)
		}
		ms.MaxEntries = n
	}
	if cfg.EnrichUnwatched {
		if err := spec.Variables[datapathVarEnrichUnwatched].Set(uint32(1)); err != nil {
			return nil, nil, fmt.Errorf("set enrich_unwatched: %w", err)
		}
	}
	// A drops rule keeps its packets out of the flow maps (only their
	// drops are kept): the drop hook cannot check its flows were watched.
	if cfg.FlowRules != nil && cfg.FlowRules.Drops != 0 {
		if err := spec.Variables[datapathVarDropsUnwatched].Set(uint32(1)); err != nil {
			return nil, nil, fmt.Errorf("set drops_unwatched: %w", err)
		}
	}
	for name, v := range cfg.TCConstants {
		sv, ok := spec.Variables[name]
		if !ok {
			return nil, nil, fmt.Errorf("TC constant %s: not in the BPF object", name)
		}
		if err := sv.Set(v); err != nil {
			return nil, nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	return spec, v4, nil
}

// loadPrograms loads the named programs, and only those, from a copy of
// the object with the given load-time constants, handing them the
// datapath's maps (so no map but the constants' own is created).
func (d *Datapath) loadPrograms(names []string, constants map[string]any) (map[string]*ebpf.Program, error) {
	// A copy of the object with the named programs only (ownSpec):
	// copying every program's instructions for each load cost ~4 % of the
	// start's CPU (docs/benchmarks.md §27).
	spec, err := d.ownSpec(names)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if _, ok := spec.Programs[name]; !ok {
			return nil, fmt.Errorf("program %s missing from the BPF object", name)
		}
	}
	for name, v := range constants {
		sv, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("constant %s missing from the BPF object", name)
		}
		if err := sv.Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: d.Maps.replacements(),
		Cache: d.btf.Load()})
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	out := make(map[string]*ebpf.Program, len(names))
	for _, name := range names {
		out[name] = coll.DetachProgram(name)
	}
	return out, nil
}

// ProgramsFor returns the program set that serves interfaces of the
// namespace with the given cookie, both pairs loaded: the shared set, or in
// the fallback that namespace's own, loaded if needed.
func (d *Datapath) ProgramsFor(cookie uint64) (*Programs, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.programsFor(cookie, true)
}

// programsFor returns the namespace's set with its Ethernet pair, and its
// L3 pair too when l3 is set, loading what is missing. Callers hold d.mu
// (or own d, in Load).
func (d *Datapath) programsFor(cookie uint64, l3 bool) (*Programs, error) {
	if d.shared {
		cookie = 0
	}
	p, ok := d.progs[cookie]
	if !ok {
		progs, err := d.loadTC(cookie, ethPrograms)
		if err != nil {
			return nil, err
		}
		p = &Programs{Ingress: progs[ProgramIngress], Egress: progs[ProgramEgress]}
		d.progs[cookie] = p
	}
	if l3 && p.IngressL3 == nil {
		progs, err := d.loadTC(cookie, l3Programs)
		if err != nil {
			return nil, err
		}
		p.IngressL3, p.EgressL3 = progs[ProgramIngressL3], progs[ProgramEgressL3]
	}
	return p, nil
}

// loadTC loads the named TC programs for the namespace with the given
// cookie (0: the shared set).
func (d *Datapath) loadTC(cookie uint64, names []string) (map[string]*ebpf.Program, error) {
	fromDev := uint32(0)
	if d.shared {
		fromDev = 1
	}
	progs, err := d.loadPrograms(names, map[string]any{datapathVarNetnsCookie: cookie, datapathVarNetnsFromDev: fromDev})
	if err != nil {
		return nil, fmt.Errorf("load tc programs: %w", err)
	}
	return progs, nil
}

// LoadedProgram is one loaded program instance and where it is attached.
type LoadedProgram struct {
	Name   string // its name in the object, e.g. "flowlens_ingress", "rtt_tcp_probe"
	Attach string // "tc_ingress", "tc_egress", or a hook's section, e.g. "tp_btf/tcp_probe"
	Prog   *ebpf.Program
}

// SharedPrograms says whether one set of TC programs serves every namespace
// (they read the device's namespace); false in the fallback, one set per
// namespace.
func (d *Datapath) SharedPrograms() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shared
}

// Programs lists every loaded program: each loaded TC set (the shared one,
// or in the fallback one per namespace; one entry per program instance, the
// L3 pair once loaded) and each running hook.
func (d *Datapath) Programs() []LoadedProgram {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]LoadedProgram, 0, 4*len(d.progs)+len(d.hooks))
	for _, p := range d.progs {
		out = append(out, LoadedProgram{ProgramIngress, "tc_ingress", p.Ingress},
			LoadedProgram{ProgramEgress, "tc_egress", p.Egress})
		if p.IngressL3 != nil {
			out = append(out, LoadedProgram{ProgramIngressL3, "tc_ingress", p.IngressL3},
				LoadedProgram{ProgramEgressL3, "tc_egress", p.EgressL3})
		}
	}
	for _, h := range d.hooks {
		if h.prog != nil {
			out = append(out, LoadedProgram{h.status.Program, h.attach, h.prog})
		}
	}
	return out
}

func (p *Programs) close() {
	for _, prog := range []*ebpf.Program{p.Ingress, p.Egress, p.IngressL3, p.EgressL3} {
		if prog != nil {
			prog.Close()
		}
	}
}

// release closes the fallback's programs of a namespace none of whose
// interfaces is attached any more (pods come and go: programs must not pile
// up). The set Load loaded (cookie 0: the shared one) stays until Close.
// Callers hold d.mu.
func (d *Datapath) release(cookie uint64) {
	if cookie == 0 || d.shared {
		return
	}
	for k := range d.attached {
		if k.netns == cookie {
			return
		}
	}
	if p, ok := d.progs[cookie]; ok {
		p.close()
		delete(d.progs, cookie)
	}
}

// Close detaches every attachment and releases programs and maps.
func (d *Datapath) Close() error {
	errs := d.DetachAll()
	d.closeHooks()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, p := range d.progs {
		p.close()
		delete(d.progs, k)
	}
	if d.Clock != nil {
		errs = errors.Join(errs, d.Clock.close())
		d.Clock = nil
	}
	return errors.Join(errs, d.Maps.close())
}

// ReadCounters sums the TC programs' per-CPU counters.
func (d *Datapath) ReadCounters() (Counters, error) { return d.Maps.ReadCounters() }

// ReadEnrichmentLost sums the enrichment events lost because their entry
// could not be inserted (see Maps.ReadEnrichmentLost).
func (d *Datapath) ReadEnrichmentLost() (uint64, error) { return d.Maps.ReadEnrichmentLost() }

// ReadEnrichmentUnwatched sums the socket-side hooks' events of flows no
// watched interface carried, not recorded (see Maps.ReadEnrichmentUnwatched).
func (d *Datapath) ReadEnrichmentUnwatched() (uint64, error) { return d.Maps.ReadEnrichmentUnwatched() }

// Spec returns the object's spec, every program in it, with this
// datapath's sizes and constants, parsed again (nil if the object, parsed
// at Load, could not be parsed again). Budget checks use it.
func (d *Datapath) Spec() *ebpf.CollectionSpec {
	spec, _, _ := newSpec(d.cfg)
	return spec
}

// ownSpec returns the object's spec with the named programs only and this
// datapath's sizes and constants, the caller's own: copied from the kept
// spec if it has them, else parsed again (the L3 pair, anything after
// ReleaseSpec).
func (d *Datapath) ownSpec(names []string) (*ebpf.CollectionSpec, error) {
	kept := d.spec.Load()
	for _, name := range names {
		if kept != nil && kept.Programs[name] == nil {
			kept = nil
		}
	}
	if kept != nil {
		cpy := &ebpf.CollectionSpec{
			Maps:      make(map[string]*ebpf.MapSpec, len(kept.Maps)),
			Programs:  make(map[string]*ebpf.ProgramSpec, len(names)),
			Variables: make(map[string]*ebpf.VariableSpec, len(kept.Variables)),
			ByteOrder: kept.ByteOrder,
			Types:     kept.Types.Copy(),
		}
		for name, ms := range kept.Maps {
			cpy.Maps[name] = ms.Copy()
		}
		for name, vs := range kept.Variables {
			cpy.Variables[name] = vs.Copy()
		}
		// The programs are shared, not copied: NewCollectionWithOptions
		// copies each before changing it, so a copy here only added 0.6
		// MiB to the start's peak (docs/benchmarks.md §41).
		for _, name := range names {
			cpy.Programs[name] = kept.Programs[name]
		}
		return cpy, nil
	}
	spec, _, err := newSpec(d.cfg)
	if err != nil {
		return nil, err
	}
	for name := range spec.Programs {
		if !slices.Contains(names, name) {
			delete(spec.Programs, name)
		}
	}
	return spec, nil
}

// ReleaseSpec drops the parsed object once the start's programs are loaded
// (the agent calls it once its hooks are started, before the start's last
// collection): its instructions, line info and BTF, ~1 MiB of heap, would
// otherwise stay for the agent's life for loads that seldom come. A later
// load parses the object again (ownSpec). In the fallback (a set per
// namespace, loaded at each new namespace) it is kept.
func (d *Datapath) ReleaseSpec() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shared {
		d.spec.Store(nil)
	}
}

// LoadProgram loads one program of the object alone, unattached, with the
// datapath's maps and the object's default constants (budget checks and
// benchmarks). The caller closes it.
func (d *Datapath) LoadProgram(name string) (*ebpf.Program, error) {
	progs, err := d.loadPrograms([]string{name}, nil)
	if err != nil {
		return nil, err
	}
	return progs[name], nil
}
