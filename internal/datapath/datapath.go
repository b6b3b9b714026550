package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/ebpf"
)

// Config is what the datapath needs at load time.
type Config struct {
	MaxFlows  uint32 // entries of each flow map
	Sampling  uint32 // 1:N; 0 or 1 = every packet
	RingBytes uint32 // overflow ring buffer size; power of two multiple of the page size (default 1 MiB)

	ForceLegacyTC bool // attach with clsact + cls_bpf even where tcx exists
	// Enrichment sizes the enrichment maps to MaxFlows; without it they
	// get one entry each, so disabled hooks cost no memory.
	Enrichment bool
	// SkipHookPrograms names enrichment programs StartHooks must not try,
	// so tests can force a fallback (e.g. "drop_kfree_skb").
	SkipHookPrograms []string
	Logger           *slog.Logger
}

// Maps are the datapath's maps, shared by every loaded program.
type Maps struct {
	Flows    [2]*ebpf.Map // the double buffer; Control[0] says which one is active
	Control  *ebpf.Map
	Counters *ebpf.Map    // per-CPU, indexed by FlowsCounter
	Overflow *ebpf.Map    // ring buffer of FlowsOverflowRec
	Enrich   [2]*ebpf.Map // double buffer of the enrichment hooks, switched by Control too
}

// Programs is one ingress/egress pair.
type Programs struct {
	Ingress *ebpf.Program `ebpf:"flowlens_ingress"`
	Egress  *ebpf.Program `ebpf:"flowlens_egress"`
}

// Datapath is the loaded kernel side. Close releases everything.
type Datapath struct {
	cfg        Config
	log        *slog.Logger
	spec       *ebpf.CollectionSpec
	enrichSpec *ebpf.CollectionSpec
	Maps       Maps
	hooks      []*hook

	mu       sync.Mutex
	progs    map[uint64]*Programs // by netns cookie
	attached map[attachKey]*attachment
}

// Load creates the maps and loads the programs.
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
	spec, err := LoadFlows()
	if err != nil {
		return nil, err
	}
	spec.Maps[FlowsMapFlowsA].MaxEntries = cfg.MaxFlows
	spec.Maps[FlowsMapFlowsB].MaxEntries = cfg.MaxFlows
	spec.Maps[FlowsMapOverflow].MaxEntries = cfg.RingBytes
	if err := spec.Variables[FlowsVarSampling].Set(cfg.Sampling); err != nil {
		return nil, fmt.Errorf("set sampling: %w", err)
	}

	enrich, err := LoadEnrich()
	if err != nil {
		return nil, err
	}
	enrichSize := uint32(1)
	if cfg.Enrichment {
		enrichSize = cfg.MaxFlows
	}
	enrich.Maps[EnrichMapEnrichA].MaxEntries = enrichSize
	enrich.Maps[EnrichMapEnrichB].MaxEntries = enrichSize

	d := &Datapath{cfg: cfg, log: cfg.Logger, spec: spec, enrichSpec: enrich,
		progs: map[uint64]*Programs{}, attached: map[attachKey]*attachment{}}
	if err := d.createMaps(); err != nil {
		d.Close()
		return nil, err
	}
	// Load the pair for cookie 0 now: it fails here, with the verifier's
	// reason, rather than at the first attach if the kernel refuses the
	// programs; BPF_PROG_TEST_RUN and benchmarks use it.
	if _, err := d.programsFor(0); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (d *Datapath) createMaps() error {
	for _, m := range []struct {
		name string
		dst  **ebpf.Map
	}{
		{FlowsMapFlowsA, &d.Maps.Flows[0]},
		{FlowsMapFlowsB, &d.Maps.Flows[1]},
		{FlowsMapControl, &d.Maps.Control},
		{FlowsMapCounters, &d.Maps.Counters},
		{FlowsMapOverflow, &d.Maps.Overflow},
		{EnrichMapEnrichA, &d.Maps.Enrich[0]},
		{EnrichMapEnrichB, &d.Maps.Enrich[1]},
	} {
		ms, ok := d.spec.Maps[m.name]
		if !ok {
			ms = d.enrichSpec.Maps[m.name]
		}
		mp, err := ebpf.NewMap(ms)
		if err != nil {
			return fmt.Errorf("create map %s: %w", m.name, err)
		}
		*m.dst = mp
	}
	return nil
}

func (d *Datapath) replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		FlowsMapFlowsA:   d.Maps.Flows[0],
		FlowsMapFlowsB:   d.Maps.Flows[1],
		FlowsMapControl:  d.Maps.Control,
		FlowsMapCounters: d.Maps.Counters,
		FlowsMapOverflow: d.Maps.Overflow,
	}
}

func (d *Datapath) loadPrograms(cookie uint64) (*Programs, error) {
	spec := d.spec.Copy()
	if err := spec.Variables[FlowsVarNetnsCookie].Set(cookie); err != nil {
		return nil, err
	}
	var p Programs
	if err := spec.LoadAndAssign(&p, &ebpf.CollectionOptions{MapReplacements: d.replacements()}); err != nil {
		return nil, fmt.Errorf("load tc programs: %w", err)
	}
	return &p, nil
}

// ProgramsFor returns the program pair that serves interfaces of the
// namespace with the given cookie, loading it if needed.
func (d *Datapath) ProgramsFor(cookie uint64) (*Programs, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.programsFor(cookie)
}

func (d *Datapath) programsFor(cookie uint64) (*Programs, error) {
	if p, ok := d.progs[cookie]; ok {
		return p, nil
	}
	p, err := d.loadPrograms(cookie)
	if err != nil {
		return nil, err
	}
	d.progs[cookie] = p
	return p, nil
}

// AllPrograms returns every loaded program pair (for stats).
func (d *Datapath) AllPrograms() []*Programs {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*Programs, 0, len(d.progs))
	for _, p := range d.progs {
		out = append(out, p)
	}
	return out
}

func (p *Programs) close() {
	if p.Ingress != nil {
		p.Ingress.Close()
	}
	if p.Egress != nil {
		p.Egress.Close()
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
	for _, m := range []*ebpf.Map{d.Maps.Flows[0], d.Maps.Flows[1], d.Maps.Control, d.Maps.Counters, d.Maps.Overflow, d.Maps.Enrich[0], d.Maps.Enrich[1]} {
		if m != nil {
			m.Close()
		}
	}
	return errs
}

// ReadCounters sums the per-CPU counters.
func (d *Datapath) ReadCounters() ([FlowsCounterCNT_MAX]uint64, error) {
	var out [FlowsCounterCNT_MAX]uint64
	var percpu []uint64
	for i := range out {
		if err := d.Maps.Counters.Lookup(uint32(i), &percpu); err != nil {
			return out, fmt.Errorf("read counter %d: %w", i, err)
		}
		for _, v := range percpu {
			out[i] += v
		}
	}
	return out, nil
}

// FlowValueFlagIfacesOverflow is FLOW_F_IFACES_OVERFLOW in bpf/types.h: the
// flow crossed more interfaces than FlowsFlowValue.Ifaces holds.
const FlowValueFlagIfacesOverflow = 0x1
