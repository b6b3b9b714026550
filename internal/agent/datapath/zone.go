package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// LoopbackIfindex is the ifindex of every network namespace's loopback
// device (the kernel's LOOPBACK_IFINDEX, bpf/zone.h).
const LoopbackIfindex = 1

// ZoneSlot is struct zone_slot: one namespace's zones (bpf/zone.h).
type ZoneSlot = datapathZoneSlot

// The zones' constants (enum zone_const, bpf/zone.h).
const (
	zoneSlots  = uint64(datapathZoneConstZONE_SLOTS)
	zoneConf   = uint32(datapathZoneConstZONE_CONF)
	ZoneSpill  = int(datapathZoneConstZONE_SPILL) // namespaces whose slot is taken, at most
	ZoneNone   = uint8(datapathZoneConstZONE_DEFAULT)
	ZoneLoNone = uint8(datapathZoneConstZONE_LO_NONE) // a loopback device's zone in a namespace given none
)

// Zones are a namespace's zones (FlowKey.Zone): Domain for the packets of
// its devices other than loopback, Lo for its loopback device's.
type Zones struct{ Domain, Lo uint8 }

// SetZones writes namespace netns's zones into the map the programs read
// (its slot in zones, or zone_spill when another namespace holds the slot).
// Call it before attaching to the namespace's devices.
func (m *Maps) SetZones(netns uint64, z Zones) error {
	if netns == 0 {
		return errors.New("zones: namespace cookie 0")
	}
	v := ZoneSlot{Netns: netns, Domain: z.Domain, Lo: z.Lo}
	i := uint32(netns % zoneSlots)
	var cur ZoneSlot
	if err := m.Zones.Lookup(i, &cur); err != nil {
		return fmt.Errorf("zones: read slot %d: %w", i, err)
	}
	if i != zoneConf && (cur.Netns == 0 || cur.Netns == netns) {
		if err := m.Zones.Update(i, v, ebpf.UpdateAny); err != nil {
			return err
		}
		// It may have been spilled while another held the slot.
		if err := m.ZoneSpill.Delete(netns); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		return nil
	}
	if err := m.ZoneSpill.Update(netns, v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("zones: namespace %d in the spill map (%d entries): %w", netns, ZoneSpill, err)
	}
	return nil
}

// DeleteZones forgets a namespace that went away.
func (m *Maps) DeleteZones(netns uint64) error {
	i := uint32(netns % zoneSlots)
	var cur ZoneSlot
	if err := m.Zones.Lookup(i, &cur); err != nil {
		return err
	}
	if i != zoneConf && cur.Netns == netns {
		return m.Zones.Update(i, ZoneSlot{}, ebpf.UpdateAny)
	}
	if err := m.ZoneSpill.Delete(netns); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// SetSeveralDomains tells the programs whether the namespaces form more
// than one domain: only then do non-loopback packets read their
// namespace's zone (otherwise it is 0). It writes the configuration slot,
// with the zones of a namespace given none (Load writes it first).
func (m *Maps) SetSeveralDomains(several bool) error {
	v := ZoneSlot{Domain: ZoneNone, Lo: ZoneLoNone}
	if several {
		v.Several = 1
	}
	return m.Zones.Update(zoneConf, v, ebpf.UpdateAny)
}

// Zone is the zone the programs give a packet on device ifindex of
// namespace netns (bpf/zone.h, zone_of), read from the same maps: tests
// build the keys they expect with it.
func (m *Maps) Zone(ifindex uint32, netns uint64) (uint8, error) {
	lo := ifindex == LoopbackIfindex
	var s ZoneSlot
	if !lo {
		if err := m.Zones.Lookup(zoneConf, &s); err != nil {
			return 0, err
		}
		if s.Several == 0 {
			return ZoneNone, nil
		}
	}
	if err := m.Zones.Lookup(uint32(netns%zoneSlots), &s); err != nil {
		return 0, err
	}
	if s.Netns != netns {
		if err := m.ZoneSpill.Lookup(netns, &s); errors.Is(err, ebpf.ErrKeyNotExist) {
			if lo {
				return ZoneLoNone, nil
			}
			return ZoneNone, nil
		} else if err != nil {
			return 0, err
		}
	}
	if lo {
		return s.Lo, nil
	}
	return s.Domain, nil
}
