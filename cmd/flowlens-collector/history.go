package main

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// historyOptions are --history-size and --history-max-age.
type historyOptions struct {
	size   int
	maxAge time.Duration
}

// historyFlags are the flow history's rows of the options table (spec,
// which lists them under their heading).
var historyFlags = []*cliconf.Option[options]{
	{Name: "history-size", Arg: "n", Default: strconv.Itoa(history.DefaultSize),
		Usage: "most recent flows kept in memory for `flowlens observe` (FlowHistory.GetFlows on --listen); 0 keeps none",
		Set:   cliconf.Int(func(o *options) *int { return &o.history.size })},
	{Name: "history-max-age", Arg: "duration", Default: history.DefaultMaxAge.String(),
		Usage: "how long a flow stays in the history after it was received",
		Set:   cliconf.Duration(func(o *options) *time.Duration { return &o.history.maxAge })},
}

func (h *historyOptions) validate() error {
	var errs []error
	if h.size < 0 {
		errs = append(errs, cliconf.Invalid("--history-size", strconv.Itoa(h.size), errors.New("must be 0 (no history) or more")))
	}
	if h.maxAge <= 0 {
		errs = append(errs, cliconf.Invalid("--history-max-age", h.maxAge.String(), errors.New("must be more than 0")))
	}
	return errors.Join(errs...)
}

// startHistory puts the flow history (nil with --history-size 0) after the
// pipeline's sink, serves it on srv and its metrics on reg.
func startHistory(o historyOptions, pl *enrich.Pipeline, srv *receiver.Server, reg prometheus.Registerer) *history.Service {
	if o.size == 0 {
		return nil
	}
	h := history.NewService(history.Options{Size: o.size, MaxAge: o.maxAge})
	if next := pl.Sink; next != nil {
		pl.Sink = func(ctx context.Context, flows []enriched.Flow) error {
			h.Add(ctx, flows)
			return next(ctx, flows)
		}
	} else {
		pl.Sink = h.Add
	}
	flowv1.RegisterFlowHistoryServer(srv, h)
	reg.MustRegister(h.Collectors()...)
	return h
}
