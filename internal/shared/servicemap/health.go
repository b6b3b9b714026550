package servicemap

import "github.com/flowlens/flowlens/internal/shared/enriched"

// addHealth adds a flow's TCP-health counts (feature tcp, docs/tcp.md) to
// its edge: the connects its source started that were refused or timed
// out. Merge sums them across collectors.
func addHealth(e *Edge, f *enriched.Flow) {
	e.FailedConnects += f.TCPFailed()
}
