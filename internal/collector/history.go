package collector

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// startHistory puts the flow history (nil with Size 0) after the
// pipeline's sink, serves it on srv and its metrics on reg.
func startHistory(o History, pl *enrich.Pipeline, srv *receiver.Server, reg prometheus.Registerer) *history.Service {
	if o.Size == 0 {
		return nil
	}
	h := history.NewService(history.Options{Size: o.Size, MaxAge: o.MaxAge, MaxFilterTerms: o.MaxFilterTerms, MaxRequestBytes: o.MaxRequestBytes,
		MaxFollowers: o.MaxFollowers, MaxFollowersPerClient: o.MaxFollowersPerClient, MaxQueries: o.MaxQueries})
	if next := pl.Sink; next != nil {
		pl.Sink = func(ctx context.Context, flows []enriched.Flow) error {
			h.Add(ctx, flows)
			return next(ctx, flows)
		}
	} else {
		pl.Sink = h.Add
	}
	h.Register(srv)
	reg.MustRegister(h.Collectors()...)
	return h
}
