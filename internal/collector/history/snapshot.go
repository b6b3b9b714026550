package history

import (
	"fmt"

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// ErrBusy is Snapshot's refusal: MaxQueries queries are under way.
type ErrBusy struct{ Max int }

func (e ErrBusy) Error() string {
	return fmt.Sprintf("%d queries under way, max %d (--history-max-queries)", e.Max, e.Max)
}

// Snapshot is the history's flows, oldest received first, for readers
// other than GetFlows (the service map, internal/collector/ui): pointer
// copies taken under the lock Add takes, as GetFlows' are, so that what
// the reader computes from them happens outside the ingest path. It holds
// one of the MaxQueries slots until release is called (refused, counted
// under RefusedQueries, when none is free): a service map counts as a
// query.
func (s *Service) Snapshot() (flows []*enriched.Flow, release func(), err error) {
	s.Stats.Queries.Add(1)
	select {
	case s.queries <- struct{}{}:
	default:
		s.Stats.refuse(RefusedQueries)
		return nil, nil, ErrBusy{Max: s.opts.MaxQueries}
	}
	s.mu.Lock()
	s.ring.Expire(s.opts.now())
	flows = s.ring.Snapshot(nil)
	s.mu.Unlock()
	released := false
	return flows, func() {
		if !released {
			released = true
			<-s.queries
		}
	}, nil
}
