package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Load builds the configuration from, lowest precedence first: the defaults,
// the YAML file named by --config or FLOWLENS_CONFIG, FLOWLENS_<NAME>
// environment variables, and the flags in args. It then runs Validate.
//
// args excludes the program name. env looks up environment variables (pass
// os.Getenv; nil means an empty environment); taking it as a parameter keeps
// Load free of process state so tests can run in parallel. A variable set to
// "" counts as unset, since env cannot tell the two apart. The only other
// outside input is os.Hostname, the last fallback for --node-name.
//
// Load prints nothing. For -h or --help it returns flag.ErrHelp, and the
// caller should print Usage and exit 0; on other errors it should print the
// error (and perhaps Usage) and exit non-zero.
func Load(args []string, env func(string) string) (*Config, error) {
	if env == nil {
		env = func(string) string { return "" }
	}

	// Flags win, but must be applied after the file and the environment, so
	// parsing only records them; a value's own errors surface when applied.
	fset := flag.NewFlagSet("flowlens", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	var given []flagValue
	for _, o := range options {
		fset.Var(&recorder{opt: o, given: &given}, o.name, o.usage)
	}
	configFlag := fset.String("config", "", "YAML configuration file")
	if err := fset.Parse(args); err != nil {
		return nil, err
	}
	if fset.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: flowlens takes only flags", fset.Arg(0))
	}

	c := defaults(env)

	path, source := env("FLOWLENS_CONFIG"), "FLOWLENS_CONFIG"
	fset.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			// An explicit --config="" turns off a file named in the environment.
			path, source = *configFlag, "--config"
		}
	})
	if path != "" {
		if err := loadFile(c, path, source); err != nil {
			return nil, err
		}
		c.ConfigFile = path
	}

	for _, o := range options {
		if v := env(o.envName()); v != "" {
			if err := o.apply(c, v); err != nil {
				return nil, invalid(o.envName(), v, err)
			}
		}
	}
	// In command-line order, so a repeated flag's last value wins.
	for _, f := range given {
		if err := f.opt.apply(c, f.value); err != nil {
			return nil, invalid("--"+f.opt.name, f.value, err)
		}
	}

	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// defaults returns the configuration before any file, variable or flag.
func defaults(env func(string) string) *Config {
	c := &Config{}
	for _, o := range options {
		if err := o.apply(c, o.def); err != nil {
			panic(fmt.Sprintf("config: bad default for --%s: %v", o.name, err))
		}
	}
	c.NodeName = env("NODE_NAME")
	if c.NodeName == "" {
		// Validate reports an empty name; the hostname error adds nothing.
		c.NodeName, _ = os.Hostname()
	}
	return c
}

type flagValue struct {
	opt   *option
	value string
}

// recorder is the flag.Value of every option: it only records what was given.
type recorder struct {
	opt   *option
	given *[]flagValue
}

func (r *recorder) String() string { return "" }

func (r *recorder) Set(s string) error {
	*r.given = append(*r.given, flagValue{r.opt, s})
	return nil
}

// invalid formats every bad-value error the same way, naming the setting as
// the user wrote it: `invalid --sampling "0": must be >= 1`.
func invalid(key, value string, reason error) error {
	return fmt.Errorf("invalid %s %q: %w", key, value, reason)
}

// pathReason drops the path from a file error, since invalid already shows it.
func pathReason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
