package datapath

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// Maps are the datapath's maps (bpf/maps.h), created once by Load and shared
// by every program the agent loads, whatever its feature.
type Maps struct {
	Flows          [2]*ebpf.Map // the flow double buffer; Control[0] says which one is active
	Control        *ebpf.Map    // [0]: the generation counter (Generations owns it); [1], [2]: written by the programs
	Counters       *ebpf.Map    // per-CPU, indexed by Counter
	Overflow       *ebpf.Map    // ring buffer of OverflowRec
	OverflowSeen   *ebpf.Map    // the flows sent to Overflow, with their counting observation per generation (LRU)
	Enrich         [2]*ebpf.Map // the enrichment double buffer, switched by Control too
	EnrichCounters *ebpf.Map    // per-CPU counters of the enrichment hooks
	RTTSeen        *ebpf.Map    // the RTT hook's per-socket memory (SK_STORAGE)
	Frags          *ebpf.Map    // first fragments' ports (LRU), shared by every namespace's TC programs and the drop hook
	FilterTables   *ebpf.Map    // the flow filter's classifier (bpf/filter.h, filter.go)
	FilterAddr     *ebpf.Map    // its LPM trie of the rules' prefixes (IPv6)
	FilterV4       *ebpf.Map    // the same for IPv4, as a multibit trie in an array
	FilterPorts    *ebpf.Map    // its per-port bits
	FilterIfaces   *ebpf.Map    // its per-interface bits
	FilterCounters *ebpf.Map    // per-CPU packets matched per rule
	DNSPending     *ebpf.Map    // DNS queries awaiting their answer (hash, feature "dns")
	DNSAnswers     *ebpf.Map    // DNS answers for the agent's address -> name cache (ring, feature "dns")
	XlatAlias      *ebpf.Map    // post-NAT tuple -> the flow's key before NAT (LRU, feature "xlat")
	TCPConns       *ebpf.Map    // TCP connections seen open, by the client's flow (LRU, feature "tcp")
	TCPZwin        *ebpf.Map    // each flow's last zero-window acknowledgement (LRU, feature "tcp")
	EnrichZero     *ebpf.Map    // one all-zero enrichment value: what a new entry starts as
	TunnelOuter    [2]*ebpf.Map // the tunnel flows (--overlay-outer-flows), switched by Control too (tunnel.go)
	TunnelZero     *ebpf.Map    // one all-zero tunnel flow value: what a new entry starts as
	Zones          *ebpf.Map    // each watched namespace's zones, by cookie mod slots (bpf/zone.h, zone.go)
	ZoneSpill      *ebpf.Map    // the namespaces whose slot in Zones is taken
	FlowBuild      *ebpf.Map    // per-CPU: where the TC programs build a new flow value before its insert (bpf/build.h)

	// percpu is the buffer the per-CPU counters are read into, reused so
	// that reading them (every flip, every pressure check, every scrape)
	// allocates nothing.
	mu        sync.Mutex
	percpu    []uint64
	percpuOut any // percpu as Lookup's destination, converted once
}

// NamedMap is one entry of the map table.
type NamedMap struct {
	Name string // the map's name in bpf/maps.h
	Map  *ebpf.Map
}

// table is the one list of the datapath's maps: Load creates them from it,
// every program load is handed them from it (MapReplacements), Close closes
// them from it, and the metrics list them from it (All).
func (m *Maps) table() []struct {
	name string
	dst  **ebpf.Map
} {
	return []struct {
		name string
		dst  **ebpf.Map
	}{
		{datapathMapFlowsA, &m.Flows[0]},
		{datapathMapFlowsB, &m.Flows[1]},
		{datapathMapControl, &m.Control},
		{datapathMapCounters, &m.Counters},
		{datapathMapOverflow, &m.Overflow},
		{datapathMapOverflowSeen, &m.OverflowSeen},
		{datapathMapEnrichA, &m.Enrich[0]},
		{datapathMapEnrichB, &m.Enrich[1]},
		{datapathMapEnrichCounters, &m.EnrichCounters},
		{datapathMapRttSeen, &m.RTTSeen},
		{datapathMapFrags, &m.Frags},
		{datapathMapFilterTables, &m.FilterTables},
		{datapathMapFilterAddr, &m.FilterAddr},
		{datapathMapFilterV4, &m.FilterV4},
		{datapathMapFilterPorts, &m.FilterPorts},
		{datapathMapFilterIfaces, &m.FilterIfaces},
		{datapathMapFilterCounters, &m.FilterCounters},
		{datapathMapDnsPending, &m.DNSPending},
		{datapathMapDnsAnswers, &m.DNSAnswers},
		{datapathMapXlatAlias, &m.XlatAlias},
		{datapathMapTcpConns, &m.TCPConns},
		{datapathMapTcpZwin, &m.TCPZwin},
		{datapathMapEnrichZero, &m.EnrichZero},
		{datapathMapTunnelOuterA, &m.TunnelOuter[0]},
		{datapathMapTunnelOuterB, &m.TunnelOuter[1]},
		{datapathMapTunnelOuterZero, &m.TunnelZero},
		{datapathMapZones, &m.Zones},
		{datapathMapZoneSpill, &m.ZoneSpill},
		{datapathMapFlowBuild, &m.FlowBuild},
	}
}

// All lists every map with its name, in the table's order.
func (m *Maps) All() []NamedMap {
	t := m.table()
	out := make([]NamedMap, 0, len(t))
	for _, e := range t {
		if *e.dst != nil {
			out = append(out, NamedMap{e.name, *e.dst})
		}
	}
	return out
}

// create makes every map of the table from spec, which has its sizes set.
func (m *Maps) create(spec *ebpf.CollectionSpec) error {
	for _, e := range m.table() {
		ms, ok := spec.Maps[e.name]
		if !ok {
			return fmt.Errorf("map %s missing from the BPF object", e.name)
		}
		mp, err := ebpf.NewMap(ms)
		if err != nil {
			return fmt.Errorf("create map %s: %w", e.name, err)
		}
		*e.dst = mp
	}
	return nil
}

// replacements hands the created maps to a program load.
func (m *Maps) replacements() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	for _, e := range m.table() {
		out[e.name] = *e.dst
	}
	return out
}

func (m *Maps) close() error {
	m.mu.Lock() // the counters' readers (a metrics scrape) may still run
	defer m.mu.Unlock()
	var errs []error
	for _, e := range m.table() {
		if *e.dst != nil {
			errs = append(errs, (*e.dst).Close())
			*e.dst = nil
		}
	}
	return errors.Join(errs...)
}

// ErrClosed is the counters' readers' error once the datapath is closed
// (a metrics scrape during shutdown).
var ErrClosed = errors.New("datapath closed")

// sumPerCPU reads index i of a per-CPU array of uint64 summed over CPUs.
// Call with mu held.
func (m *Maps) sumPerCPU(mp *ebpf.Map, i uint32) (uint64, error) {
	if mp == nil {
		return 0, ErrClosed
	}
	if m.percpu == nil {
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return 0, err
		}
		m.percpu = make([]uint64, n)
		m.percpuOut = m.percpu
	}
	if err := mp.Lookup(i, m.percpuOut); err != nil {
		return 0, err
	}
	var sum uint64
	for _, v := range m.percpu {
		sum += v
	}
	return sum, nil
}

// ReadCounters sums the TC programs' per-CPU counters.
func (m *Maps) ReadCounters() (Counters, error) {
	var out Counters
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range out {
		v, err := m.sumPerCPU(m.Counters, uint32(i))
		if err != nil {
			return out, fmt.Errorf("read counter %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// ReadCounter sums one of the TC programs' per-CPU counters.
func (m *Maps) ReadCounter(c Counter) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.sumPerCPU(m.Counters, uint32(c))
	if err != nil {
		return 0, fmt.Errorf("read counter %d: %w", c, err)
	}
	return v, nil
}

// ReadEnrichmentLost sums over CPUs the enrichment events (drops, RTT
// samples, retransmits) lost because their entry could not be inserted into
// the enrichment map: the map was full, or the kernel's allocator failed
// (the maps are not preallocated).
func (m *Maps) ReadEnrichmentLost() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.sumPerCPU(m.EnrichCounters, enrichCounterLost)
	if err != nil {
		return 0, fmt.Errorf("read enrichment counters: %w", err)
	}
	return v, nil
}

// ReadEnrichmentUnwatched sums over CPUs the events of the socket-side
// hooks (drops, RTT samples, retransmits) not recorded because no watched
// interface carried their flow (bpf/enrich.h, watched; 0 with
// Config.EnrichUnwatched).
func (m *Maps) ReadEnrichmentUnwatched() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.sumPerCPU(m.EnrichCounters, enrichCounterUnwatched)
	if err != nil {
		return 0, fmt.Errorf("read enrichment counters: %w", err)
	}
	return v, nil
}

// ReadDNSAnswersLost sums over CPUs the DNS answers the TC programs could
// not hand to the agent because ring dns_answers was full.
func (m *Maps) ReadDNSAnswersLost() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.sumPerCPU(m.EnrichCounters, enrichCounterDNSLost)
	if err != nil {
		return 0, fmt.Errorf("read enrichment counters: %w", err)
	}
	return v, nil
}

// ReadDNSPendingFull sums over CPUs the DNS queries the TC programs could
// not track because the dns feature's table of pending queries was full.
func (m *Maps) ReadDNSPendingFull() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.sumPerCPU(m.EnrichCounters, enrichCounterDNSFull)
	if err != nil {
		return 0, fmt.Errorf("read enrichment counters: %w", err)
	}
	return v, nil
}
