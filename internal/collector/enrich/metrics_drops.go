package enrich

import (
	"sync"

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// The metrics of feature drops: the packets the kernel dropped, by cause.
const (
	MetricDropPackets = Prefix + "drop_packets_total"
	MetricDropBytes   = Prefix + "drop_bytes_total"

	// CauseOther replaces drop causes that are not kernel-style names
	// ([A-Za-z0-9_], at most 64) and causes beyond MaxDropCauses distinct
	// ones, so that agents cannot grow the cause label without bound.
	CauseOther = "OTHER"
	// MaxDropCauses bounds the distinct values of the cause label (the
	// kernel's enum skb_drop_reason has about 120).
	MaxDropCauses = 256
)

var dropsMetricNames = []string{MetricDropPackets, MetricDropBytes}

type dropsMetrics struct {
	packets, bytes *counterSeries

	causeMu sync.RWMutex
	causes  map[string]struct{}
}

func (d *dropsMetrics) register(r registrar) {
	d.causes = map[string]struct{}{}
	labels := []string{"src_namespace", "dst_namespace", "cause"}
	d.packets = r.counterVec(MetricDropPackets, "Packets the kernel dropped, by source and destination namespace and drop cause (the kernel's drop reason).", labels)
	d.bytes = r.counterVec(MetricDropBytes, "Bytes of the packets the kernel dropped, by source and destination namespace and drop cause.", labels)
}

// observe: drops come from the agent's drop hooks, which see every packet
// whatever the sampling rate: they are exact counts, not scaled.
func (d *dropsMetrics) observe(f *enriched.Flow, l *flowLabels) {
	if f.DropPackets > 0 || f.DropBytes > 0 {
		cause := d.cause(f.DropCause)
		if d.packets != nil {
			d.packets.add(l.now, float64(f.DropPackets), l.srcNS, l.dstNS, cause)
		}
		if d.bytes != nil {
			d.bytes.add(l.now, float64(f.DropBytes), l.srcNS, l.dstNS, cause)
		}
	}
}

// cause bounds the drop cause label.
func (d *dropsMetrics) cause(c string) string {
	if !validCause(c) {
		return CauseOther
	}
	d.causeMu.RLock()
	_, ok := d.causes[c]
	d.causeMu.RUnlock()
	if ok {
		return c
	}
	d.causeMu.Lock()
	defer d.causeMu.Unlock()
	if _, ok := d.causes[c]; ok {
		return c
	}
	if len(d.causes) >= MaxDropCauses {
		return CauseOther
	}
	d.causes[c] = struct{}{}
	return c
}

// validCause accepts the kernel's drop reason names (and the agent's
// numeric fallback): [A-Za-z0-9_], 64 at most; "" (unknown) too.
func validCause(c string) bool {
	if len(c) > 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_') {
			return false
		}
	}
	return true
}
