package collector

import (
	"errors"
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// historyOptions are the flow history's rows of the option table (Spec,
// which lists them under their heading).
var historyOptions = []*cliconf.Option[Config]{
	{Name: "history-size", Arg: "n", Default: strconv.Itoa(history.DefaultSize),
		Usage: "most recent flows kept in memory for `flowlens observe` (FlowHistory.GetFlows on --listen); 0 keeps none",
		Set:   cliconf.Int(func(c *Config) *int { return &c.History.Size })},
	{Name: "history-max-age", Arg: "duration", Default: history.DefaultMaxAge.String(),
		Usage: "how long a flow stays in the history after it was received",
		Set:   cliconf.Duration(func(c *Config) *time.Duration { return &c.History.MaxAge })},
}

func (h *History) validate() error {
	var errs []error
	if h.Size < 0 {
		errs = append(errs, cliconf.Invalid("--history-size", strconv.Itoa(h.Size), errors.New("must be 0 (no history) or more")))
	}
	if h.MaxAge <= 0 {
		errs = append(errs, cliconf.Invalid("--history-max-age", h.MaxAge.String(), errors.New("must be more than 0")))
	}
	return errors.Join(errs...)
}
