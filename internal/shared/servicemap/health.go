package servicemap

import "github.com/flowlens/flowlens/internal/shared/enriched"

// addHealth adds a flow's TCP-health counts to its edge. The hook for the
// TCP-health feature (branch s29-tcp): once pkg/flow's record carries its
// failed connects, sum them here into e.FailedConnects (already part of
// the JSON and of Unhealthy) and in Merge.
func addHealth(e *Edge, f *enriched.Flow) {
	_, _ = e, f
}
