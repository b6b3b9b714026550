package evictor

import (
	"strconv"
	"sync"
)

// IfaceKey identifies an interface the way the datapath does: by network
// namespace cookie and ifindex (ifindexes repeat across namespaces).
type IfaceKey struct {
	Netns   uint64
	Ifindex uint32
}

type ifaceName struct {
	name, netns string
	removedAt   uint64 // eviction cycle at which it was removed; 0 = present
}

// Resolver maps (netns cookie, ifindex) to interface and namespace names.
// Removed interfaces stay resolvable for two more eviction cycles, so flows
// they saw just before going away still carry their names.
type Resolver struct {
	mu    sync.RWMutex
	names map[IfaceKey]ifaceName
	cycle uint64
}

// NewResolver returns an empty Resolver.
func NewResolver() *Resolver {
	return &Resolver{names: map[IfaceKey]ifaceName{}, cycle: 1}
}

// Add records an interface.
func (r *Resolver) Add(k IfaceKey, name, netns string) {
	r.mu.Lock()
	r.names[k] = ifaceName{name: name, netns: netns}
	r.mu.Unlock()
}

// Remove marks an interface as gone.
func (r *Resolver) Remove(k IfaceKey) {
	r.mu.Lock()
	if n, ok := r.names[k]; ok {
		n.removedAt = r.cycle
		r.names[k] = n
	}
	r.mu.Unlock()
}

// Tick advances the eviction cycle and forgets interfaces removed two cycles ago.
func (r *Resolver) Tick() {
	r.mu.Lock()
	r.cycle++
	for k, n := range r.names {
		if n.removedAt != 0 && r.cycle-n.removedAt > 2 {
			delete(r.names, k)
		}
	}
	r.mu.Unlock()
}

// Lookup returns the interface's name and namespace name. Unknown interfaces
// get "if<index>" and the cookie in decimal, so nothing is dropped.
func (r *Resolver) Lookup(k IfaceKey) (name, netns string) {
	r.mu.RLock()
	n, ok := r.names[k]
	r.mu.RUnlock()
	if ok {
		return n.name, n.netns
	}
	return "if" + strconv.FormatUint(uint64(k.Ifindex), 10), strconv.FormatUint(k.Netns, 10)
}

// nameCache resolves interface names for one eviction without taking the
// Resolver's lock for every flow (a node has few interfaces and many flows);
// its map is kept from one eviction to the next, so it allocates only when
// the node gains interfaces.
type nameCache struct {
	res *Resolver
	m   map[IfaceKey]ifaceName
}

// reset starts an eviction: names are resolved afresh from r.
func (c *nameCache) reset(r *Resolver) {
	c.res = r
	if c.m == nil {
		c.m = map[IfaceKey]ifaceName{}
	}
	clear(c.m)
}

// Lookup is Resolver.Lookup, remembered for the rest of the eviction.
func (c *nameCache) Lookup(k IfaceKey) (name, netns string) {
	if n, ok := c.m[k]; ok {
		return n.name, n.netns
	}
	name, netns = c.res.Lookup(k)
	c.m[k] = ifaceName{name: name, netns: netns}
	return name, netns
}
