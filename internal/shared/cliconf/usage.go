package cliconf

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Usage writes the command-line help to w. Load never prints; the caller
// calls Usage when Load returns flag.ErrHelp.
func (s *Spec[C]) Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", s.Program)
	if s.Summary != "" {
		fmt.Fprintf(w, "%s\n\n", wrap(s.Summary, 76))
	}
	about := fmt.Sprintf("Every flag --some-name can also be set with the environment variable "+
		"%sSOME_NAME or the key some_name in the YAML file given by --config (or %s). "+
		"Flags win over the environment, which wins over the file. "+
		"Lists are comma-separated; a YAML file may also use a YAML list.", s.EnvPrefix, s.ConfigEnv())
	for _, o := range s.Options {
		if o.Repeat {
			about += " A list flag marked (repeatable) adds up when given more than once."
			break
		}
	}
	fmt.Fprintf(w, "%s\n\nFlags:\n", wrap(about, 76))
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  --config file\tYAML configuration file\n")
	fmt.Fprintf(tw, "  --version\tprint the version and exit\n")
	section := ""
	for _, o := range s.Options {
		if o.Section != section {
			// A line without a tab ends tabwriter's column block: each
			// section is aligned on its own.
			section = o.Section
			fmt.Fprintf(tw, "\n%s:\n", section)
		}
		usage := o.Usage
		if o.Repeat {
			usage += " (repeatable)"
		}
		if o.Default != "" {
			usage += fmt.Sprintf(" (default %q)", o.Default)
		}
		name := "--" + o.Name
		if o.Short != "" {
			name = "-" + o.Short + ", " + name
		}
		fmt.Fprintf(tw, "  %s %s\t%s\n", name, o.Arg, usage)
	}
	tw.Flush()
}

// wrap breaks text into lines of at most width characters, at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(word) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
