package collector

import (
	"errors"
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/pkg/receiver"
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
	{Name: "history-max-filter-terms", Arg: "n", Default: strconv.Itoa(history.DefaultMaxFilterTerms),
		Usage: "most terms in one GetFlows filter: each FlowFilter and each value in it (port, IP, name...) counts one; more get InvalidArgument",
		Set:   cliconf.Int(func(c *Config) *int { return &c.History.MaxFilterTerms })},
	{Name: "history-max-request-bytes", Arg: "n", Default: strconv.Itoa(history.DefaultMaxRequestBytes),
		Usage: "largest GetFlows request (bytes); larger ones get ResourceExhausted before they are decoded",
		Set:   cliconf.Int(func(c *Config) *int { return &c.History.MaxRequestBytes })},
	{Name: "history-max-followers", Arg: "n", Default: strconv.Itoa(history.DefaultMaxFollowers),
		Usage: "most GetFlows streams in follow mode (flowlens observe --follow) open at once; more get ResourceExhausted",
		Set:   cliconf.Int(func(c *Config) *int { return &c.History.MaxFollowers })},
	{Name: "history-max-followers-per-client", Arg: "n", Default: strconv.Itoa(history.DefaultMaxFollowersPerClient),
		Usage: "most follow streams open at once from one client (the authenticated user with --auth kubernetes, else the IP address); more get ResourceExhausted",
		Set:   cliconf.Int(func(c *Config) *int { return &c.History.MaxFollowersPerClient })},
	{Name: "history-max-queries", Arg: "n", Default: strconv.Itoa(history.DefaultMaxQueries),
		Usage: "most GetFlows calls answering from the history at once (a follower until it has sent the history); more get ResourceExhausted",
		Set:   cliconf.Int(func(c *Config) *int { return &c.History.MaxQueries })},
	{Name: "max-streams-per-connection", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxStreamsPerConnection),
		Usage: "most gRPC calls open at once on one client connection (HTTP/2 MAX_CONCURRENT_STREAMS), for Export and GetFlows alike",
		Set:   cliconf.Int(func(c *Config) *int { return &c.Limits.MaxStreamsPerConnection })},
}

func (h *History) validate() error {
	var errs []error
	if h.Size < 0 {
		errs = append(errs, cliconf.Invalid("--history-size", strconv.Itoa(h.Size), errors.New("must be 0 (no history) or more")))
	}
	if h.MaxAge <= 0 {
		errs = append(errs, cliconf.Invalid("--history-max-age", h.MaxAge.String(), errors.New("must be more than 0")))
	}
	for _, o := range []struct {
		name string
		v    int
	}{{"--history-max-filter-terms", h.MaxFilterTerms}, {"--history-max-request-bytes", h.MaxRequestBytes},
		{"--history-max-followers", h.MaxFollowers}, {"--history-max-followers-per-client", h.MaxFollowersPerClient},
		{"--history-max-queries", h.MaxQueries}} {
		if o.v < 1 {
			errs = append(errs, cliconf.Invalid(o.name, strconv.Itoa(o.v), errors.New("must be at least 1")))
		}
	}
	return errors.Join(errs...)
}
