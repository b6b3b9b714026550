package datapath

import "fmt"

// enrichCounterLost is the index in enrich_counters (bpf/enrich.c) of the
// events lost because their entry could not be inserted.
const enrichCounterLost = 0

// ReadEnrichmentLost sums over CPUs the enrichment events (drops, RTT
// samples, retransmits) lost because their entry could not be inserted into
// the enrichment map: the map was full, or the kernel's allocator failed
// (the maps are not preallocated). 0 before StartHooks.
func (d *Datapath) ReadEnrichmentLost() (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hooks {
		if h.counters == nil {
			continue
		}
		var percpu []uint64
		if err := h.counters.Lookup(uint32(enrichCounterLost), &percpu); err != nil {
			return 0, fmt.Errorf("read enrichment counters: %w", err)
		}
		var sum uint64
		for _, v := range percpu {
			sum += v
		}
		return sum, nil
	}
	return 0, nil
}
