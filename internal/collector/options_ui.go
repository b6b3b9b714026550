package collector

import (
	"errors"
	"strconv"

	"github.com/flowlens/flowlens/internal/collector/collectoropt"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
)

// UI is the service map's listener and caps (package ui, docs/ui.md).
type UI struct {
	// Listen serves the page and /api/v1/*; "" serves none. Off, too,
	// without a history (--history-size 0).
	Listen             string
	MaxNodes, MaxEdges int
}

// uiOptions are the service map's rows of the option table.
var uiOptions = []*cliconf.Option[Config]{
	{Name: "ui-listen", Arg: "host:port",
		Usage: `address serving the service map (the page and GET /api/v1/graph, /api/v1/flows) from the flow history, authorized as GetFlows (--auth); "" (the default) serves none, nor does --history-size 0; an address that is not loopback needs --tls-cert or --insecure-plaintext, like --listen (the operator sets 127.0.0.1:` + strconv.Itoa(collectoropt.DefaultUIPort) + `, reached by flowlens ui's port-forward)`,
		Set:   cliconf.String(func(o *Config) *string { return &o.UI.Listen })},
	{Name: "ui-max-nodes", Arg: "n", Default: strconv.Itoa(servicemap.DefaultMaxNodes),
		Usage: "most nodes in one service map; more are left out (truncated, counted in omitted_nodes), the least traffic first",
		Set:   cliconf.Int(func(o *Config) *int { return &o.UI.MaxNodes })},
	{Name: "ui-max-edges", Arg: "n", Default: strconv.Itoa(servicemap.DefaultMaxEdges),
		Usage: "most edges in one service map; more are left out (truncated, counted in omitted_edges), the least traffic first",
		Set:   cliconf.Int(func(o *Config) *int { return &o.UI.MaxEdges })},
}

func (o *Config) validateUI() error {
	var errs []error
	u := &o.UI
	if u.Listen != "" {
		if err := cliconf.CheckListenAddress("--ui-listen", u.Listen); err != nil {
			errs = append(errs, err)
		} else if o.TLSCert == "" && !o.InsecurePlaintext && !cliconf.Loopback(u.Listen) {
			errs = append(errs, cliconf.Invalid("--ui-listen", u.Listen, errors.New(
				"is not a loopback address: serve TLS (--tls-cert and --tls-key), or give --insecure-plaintext to let anyone who reaches it read flows in plaintext")))
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--ui-max-nodes", u.MaxNodes}, {"--ui-max-edges", u.MaxEdges}} {
		if c.v < 1 {
			errs = append(errs, cliconf.Invalid(c.name, strconv.Itoa(c.v), errors.New("must be at least 1")))
		}
	}
	return errors.Join(errs...)
}
