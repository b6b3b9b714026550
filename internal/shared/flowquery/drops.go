package flowquery

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// drops: the flow had dropped packets (drop_packets > 0, feature drops).
func drops(ff *flowv1.FlowFilter) ([]check, error) {
	return one(ff.Drops, dropped), nil
}

func dropped(f *enriched.Flow) bool { return f.DropPackets > 0 }
