package config

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Usage writes the command-line help to w. Load never prints; the caller
// calls Usage when Load returns flag.ErrHelp, and may on other errors.
func Usage(w io.Writer) {
	fmt.Fprint(w, `Usage: flowlens [flags]

Every flag --some-name can also be set with the environment variable
FLOWLENS_SOME_NAME or the key some_name in the YAML file given by --config
(or FLOWLENS_CONFIG). Flags win over the environment, which wins over the
file. Lists are comma-separated; a YAML file may also use a YAML list.

Flags:
`)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  --config file\tYAML configuration file\n")
	for _, o := range options {
		def := ""
		if o.def != "" {
			def = fmt.Sprintf(" (default %q)", o.def)
		}
		fmt.Fprintf(tw, "  --%s %s\t%s%s\n", o.name, o.arg, o.usage, def)
	}
	tw.Flush()
}
