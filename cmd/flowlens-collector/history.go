package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
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
