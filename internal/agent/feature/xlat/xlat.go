// Package xlat is the "xlat" feature: conntrack NAT translation per flow.
// For a flow whose addresses conntrack rewrote (kube-proxy's DNAT of a
// Service's virtual IP to a backend, SNAT, masquerade), the record carries
// the source and destination its packets have after NAT. A packet seen
// before and after NAT is one flow, keyed on its tuple before NAT, so it
// is counted once (docs/design/counting.md, Translated packets). Kernel
// side: bpf/xlat.h, inside the TC programs (no hook of its own);
// docs/xlat.md.
package xlat

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// lookupKfunc is the conntrack kfunc bpf/xlat.h calls from the TC programs.
const lookupKfunc = "bpf_skb_ct_lookup"

// Feature records NAT translations.
type Feature struct{ feature.NoOptions }

// New returns the feature.
func New() *Feature { return &Feature{} }

func (*Feature) Name() string { return "xlat" }

func (*Feature) DocPage() string { return "docs/xlat.md" }

func (*Feature) Config() config.Feature { return config.Feature{Brief: "conntrack NAT translation"} }

func (*Feature) Doc() string {
	return "conntrack NAT translation (Service DNAT, SNAT): the flow's addresses and ports after NAT"
}

// Plan switches the lookup on inside the TC programs when the kernel has
// the conntrack kfunc (built in, or nf_conntrack loaded).
func (*Feature) Plan(kernel *btf.Spec) datapath.Plan {
	h := datapath.Plan{Name: "xlat"}
	if err := hasKfunc(kernel); err != nil {
		h.Err = err
		return h
	}
	h.TC = map[string]any{"xlat_on": uint32(1)}
	// The map of post-NAT tuples to their flows' keys (bpf/xlat.h,
	// xlat_alias; LRU): at most one entry per flow of a generation (a
	// flow's packets after NAT have one tuple), so sized like the flow
	// maps; an entry it forgets is written again by the next packet
	// where conntrack is.
	h.FlowSizedMaps = []string{datapath.MapXlatAlias}
	return h
}

func hasKfunc(kernel *btf.Spec) error {
	if kernel == nil {
		return fmt.Errorf("%w: kernel BTF unreadable, cannot find %s", datapath.ErrUnsupported, lookupKfunc)
	}
	var fn *btf.Func
	if err := kernel.TypeByName(lookupKfunc, &fn); err == nil {
		return nil
	} else if !errors.Is(err, btf.ErrNotFound) {
		return err
	}
	// nf_conntrack as a module: its own BTF.
	if mod, err := btf.LoadKernelModuleSpec("nf_conntrack"); err == nil {
		if err := mod.TypeByName(lookupKfunc, &fn); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: no %s kfunc (conntrack not in the kernel, or nf_conntrack not loaded)", datapath.ErrUnsupported, lookupKfunc)
}

func (*Feature) Fields() []string {
	return []string{"xlat_src_addr", "xlat_src_port", "xlat_dst_addr", "xlat_dst_port", "xlat_zone_id"}
}

// Fill copies the translation, when conntrack had one.
func (*Feature) Fill(r *flow.Record, v *datapath.EnrichValue) {
	if v.Xlat == 0 {
		return
	}
	r.XlatSrcAddr = addr(v.XlatSrc)
	r.XlatDstAddr = addr(v.XlatDst)
	r.XlatSrcPort, r.XlatDstPort, r.XlatZoneID = v.XlatSport, v.XlatDport, v.XlatZone
}

// addr is a key-format address as the record holds it: IPv4 unmapped.
func addr(b [16]byte) netip.Addr { return netip.AddrFrom16(b).Unmap() }
