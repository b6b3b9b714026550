// Package cliconf is the configuration machinery every flowlens binary
// shares: a table of options over the binary's own configuration struct,
// filled in from, lowest precedence first, the options' defaults, a YAML
// file, environment variables and command-line flags; errors that name the
// setting as the user wrote it; and the help text.
//
// Every option is defined once, in a Spec's Options. Its flag name is the only
// spelling written down; the environment variable (Spec.EnvPrefix plus the
// name in upper case with "_" for "-": FLOWLENS_AGENT_CACHE_ACTIVE_TIMEOUT for
// --cache-active-timeout when the prefix is "FLOWLENS_AGENT_") and the YAML
// key (cache_active_timeout) are derived from it, so the three spellings
// cannot drift apart. The file is named by --config or <prefix>CONFIG. Each
// binary's prefix is FLOWLENS_<BINARY>_: AGENT, COLLECTOR, OPERATOR, and
// OBSERVE for `flowlens observe`.
//
// A table is built from rows written where they belong (compose.go): Embed
// places rows written over a part of the configuration (a package's own
// options struct, e.g. a feature's) into a binary's table; InSection puts
// rows under a heading of the help, which lists them by component. Groups
// several binaries need are written once (groups.go): ClientTLS, KafkaConn,
// with their checks.
//
// Flags are parsed with Go's flag package, so -name works like --name, and
// -h, --help and --version are built in: Load returns flag.ErrHelp or
// ErrVersion for them, and the caller prints Usage or the version.
//
// Value errors read `invalid --sampling "0": must be >= 1` (or name the
// environment variable or YAML key the value came from); Spec.Validate, run
// last, should name the flag whatever the source, since the flag is what the
// help documents.
package cliconf

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"gopkg.in/yaml.v3"
)

// Option is one setting of a configuration struct C.
type Option[C any] struct {
	Name    string // flag name, e.g. "cache-active-timeout"
	Arg     string // placeholder for the value in the help, e.g. "duration"
	Default string // default, parsed like a user's value so the help cannot lie
	Usage   string
	// Short, if set, is a one-letter alias: -n for --collector-namespace.
	Short string
	// Section is the heading the help lists the option under (the
	// component it configures, e.g. "Kafka exporter"); options are listed in
	// table order, a heading each time the section changes. See InSection.
	Section string

	// Bool lets the flag be given without a value: --name means --name=true.
	Bool bool
	// Repeat makes a list flag add up when given more than once on the
	// command line (--port 53 --port 443 is --port 53,443) instead of the
	// last one winning. The environment and the file give the whole list.
	Repeat bool

	// Exactly one of Set and SetList is non-nil. List options get their
	// entries already split (see SplitList), so that a YAML sequence needs no
	// comma splitting.
	Set     func(c *C, s string) error
	SetList func(c *C, items []string) error

	// SetNode, if set, takes the option's value in the YAML file when it is a
	// YAML list or mapping: a structured option, such as a list of objects,
	// which a flag or a variable cannot spell. A plain value still goes to
	// Set. The node keeps its lines, so an error can point inside the value
	// with AtLine.
	SetNode func(c *C, n *yaml.Node) error
}

// EnvName is the option's environment variable for the given prefix.
func (o *Option[C]) EnvName(prefix string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(o.Name, "-", "_"))
}

// YAMLKey is the option's key in the YAML file.
func (o *Option[C]) YAMLKey() string { return strings.ReplaceAll(o.Name, "-", "_") }

// Apply sets the option from a value as written in a flag or environment
// variable, where lists are comma-separated.
func (o *Option[C]) Apply(c *C, s string) error {
	if o.SetList != nil {
		return o.SetList(c, SplitList(s))
	}
	return o.Set(c, s)
}

// Spec describes one binary's configuration.
type Spec[C any] struct {
	// Program is the name in the help's usage line and in the error for a
	// positional argument, e.g. "flowlens-collector".
	Program string
	// Summary, if set, is a paragraph of help printed after the usage line.
	Summary string
	// EnvPrefix starts every environment variable, e.g. "FLOWLENS_"; the
	// file's variable is EnvPrefix+"CONFIG".
	EnvPrefix string
	// Options is in the order the help lists them.
	Options []*Option[C]

	// Init, if set, runs after the options' defaults and before the file:
	// for defaults that come from elsewhere (e.g. $NODE_NAME).
	Init func(c *C, env func(string) string)
	// FileRead, if set, is told the path of the YAML file that was read.
	FileRead func(c *C, path string)
	// Validate, if set, runs last; its error is Load's.
	Validate func(c *C) error
}

// ErrVersion is Load's error for --version: the caller prints the version
// (see internal/shared/version) and exits 0.
var ErrVersion = errors.New("version requested")

// ConfigEnv is the environment variable naming the YAML file.
func (s *Spec[C]) ConfigEnv() string { return s.EnvPrefix + "CONFIG" }

// Load builds the configuration from, lowest precedence first: the options'
// defaults (then Init), the YAML file named by --config or <prefix>CONFIG,
// <prefix><NAME> environment variables, and the flags in args; a flag
// given twice takes its last value, unless it is a Repeat list. It then runs
// Validate.
//
// args excludes the program name. env looks up environment variables (pass
// os.Getenv; nil means an empty environment); taking it as a parameter keeps
// Load free of process state so tests can run in parallel. A variable set to
// "" counts as unset, since env cannot tell the two apart.
//
// Load prints nothing. For -h or --help it returns flag.ErrHelp, and the
// caller should print Usage and exit 0; for --version, ErrVersion; on other
// errors the caller should print the error and exit 2.
func (s *Spec[C]) Load(args []string, env func(string) string) (*C, error) {
	if env == nil {
		env = func(string) string { return "" }
	}

	// Flags win, but must be applied after the file and the environment, so
	// parsing only records them; a value's own errors surface when applied.
	fset := flag.NewFlagSet(s.Program, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	var given []flagValue[C]
	for _, o := range s.Options {
		r := &recorder[C]{opt: o, given: &given}
		fset.Var(r, o.Name, o.Usage)
		if o.Short != "" {
			fset.Var(r, o.Short, o.Usage)
		}
	}
	configFlag := fset.String("config", "", "YAML configuration file")
	versionFlag := fset.Bool("version", false, "print the version and exit")
	if err := fset.Parse(args); err != nil {
		return nil, s.parseError(err)
	}
	if *versionFlag {
		return nil, ErrVersion
	}
	if fset.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: %s takes only flags (--help lists them)", fset.Arg(0), s.Program)
	}

	c := s.defaults(env)

	path, source := env(s.ConfigEnv()), s.ConfigEnv()
	fset.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			// An explicit --config="" turns off a file named in the environment.
			path, source = *configFlag, "--config"
		}
	})
	if path != "" {
		if err := s.loadFile(c, path, source); err != nil {
			return nil, err
		}
		if s.FileRead != nil {
			s.FileRead(c, path)
		}
	}

	for _, o := range s.Options {
		if v := env(o.EnvName(s.EnvPrefix)); v != "" {
			if err := o.Apply(c, v); err != nil {
				return nil, Invalid(o.EnvName(s.EnvPrefix), v, err)
			}
		}
	}
	// In command-line order, so a repeated flag's last value wins; Repeat
	// lists gather every occurrence and are applied once, after the rest.
	repeated := map[*Option[C]][]string{}
	for _, f := range given {
		if f.opt.Repeat && f.opt.SetList != nil {
			repeated[f.opt] = append(repeated[f.opt], f.value)
			continue
		}
		if err := f.opt.Apply(c, f.value); err != nil {
			return nil, Invalid("--"+f.opt.Name, f.value, err)
		}
	}
	for _, o := range s.Options {
		values, ok := repeated[o]
		if !ok {
			continue
		}
		var items []string
		for _, v := range values {
			items = append(items, SplitList(v)...)
		}
		if err := o.SetList(c, items); err != nil {
			return nil, Invalid("--"+o.Name, strings.Join(values, ","), err)
		}
	}

	if s.Validate != nil {
		if err := s.Validate(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseError says the flag package's errors in the words of the options:
// `unknown flag --nope (--help lists them)`, `--sampling needs a value (n)`.
// (The flag package's messages are stable: its tests spell them.)
func (s *Spec[C]) parseError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag %s (--help lists them)", dashes(name))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		for _, o := range s.Options {
			if o.Name == name || o.Short == name {
				return fmt.Errorf("--%s needs a value (%s)", o.Name, o.Arg)
			}
		}
		return fmt.Errorf("%s needs a value", dashes(name))
	}
	return err
}

// dashes spells a flag name as the help does: -n, --name.
func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// defaults returns the configuration before any file, variable or flag.
func (s *Spec[C]) defaults(env func(string) string) *C {
	c := new(C)
	for _, o := range s.Options {
		if err := o.Apply(c, o.Default); err != nil {
			panic(fmt.Sprintf("%s: bad default for --%s: %v", s.Program, o.Name, err))
		}
	}
	if s.Init != nil {
		s.Init(c, env)
	}
	return c
}

type flagValue[C any] struct {
	opt   *Option[C]
	value string
}

// recorder is the flag.Value of every option: it only records what was given.
type recorder[C any] struct {
	opt   *Option[C]
	given *[]flagValue[C]
}

func (r *recorder[C]) String() string   { return "" }
func (r *recorder[C]) IsBoolFlag() bool { return r.opt.Bool }

func (r *recorder[C]) Set(s string) error {
	*r.given = append(*r.given, flagValue[C]{r.opt, s})
	return nil
}

// Invalid formats every bad-value error the same way, naming the setting as
// the user wrote it: `invalid --sampling "0": must be >= 1`. When reason
// is an ItemError, the value shown is the bad list entry alone.
func Invalid(key, value string, reason error) error {
	var whole *asIs
	if errors.As(reason, &whole) {
		return whole.err
	}
	var ie *itemError
	if errors.As(reason, &ie) {
		value, reason = ie.item, ie.reason
	}
	return fmt.Errorf("invalid %s %q: %w", key, value, reason)
}

// AsIs is a setter's error that is about the command line's shape rather
// than the value (`--not --not: ...`): Load returns it as it is, not as
// `invalid --flag "value": ...`.
func AsIs(err error) error { return &asIs{err} }

type asIs struct{ err error }

func (e *asIs) Error() string { return e.err.Error() }
func (e *asIs) Unwrap() error { return e.err }

// ItemError is a SetList error about one entry of the list: Invalid shows
// that entry rather than the whole list, e.g. `invalid --port "70000": must
// be ...` for --port 443,70000.
func ItemError(item string, reason error) error { return &itemError{item, reason} }

type itemError struct {
	item   string
	reason error
}

func (e *itemError) Error() string { return fmt.Sprintf("%q: %v", e.item, e.reason) }
func (e *itemError) Unwrap() error { return e.reason }

// PathReason drops the path from a file error, since Invalid already shows it.
func PathReason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
