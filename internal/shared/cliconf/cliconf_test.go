package cliconf

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// conf is a toy configuration: the machinery knows nothing of the agent's.
type conf struct {
	Name    string
	Wait    time.Duration
	Verbose bool
	Ports   []int
	File    string
}

func setPorts(c *conf, items []string) error {
	c.Ports = nil
	for _, it := range items {
		n, err := strconv.Atoi(it)
		if err != nil || n < 0 || n > 65535 {
			return ItemError(it, errors.New("must be a port number from 0 to 65535"))
		}
		c.Ports = append(c.Ports, n)
	}
	return nil
}

func testSpec() *Spec[conf] {
	return &Spec[conf]{
		Program:   "toy",
		Summary:   "Toy does nothing.",
		EnvPrefix: "TOY_",
		Options: slices.Concat([]*Option[conf]{
			{Name: "name", Arg: "name", Default: "x", Usage: "a name", Set: String(func(c *conf) *string { return &c.Name })},
			{Name: "wait", Arg: "duration", Default: "1s", Usage: "a wait", Set: Duration(func(c *conf) *time.Duration { return &c.Wait })},
			{Name: "verbose", Arg: "bool", Default: "false", Usage: "talk", Bool: true, Set: Bool(func(c *conf) *bool { return &c.Verbose })},
		}, InSection("Network", []*Option[conf]{
			{Name: "port", Arg: "list", Usage: "ports", Repeat: true, SetList: setPorts},
		})),
		FileRead: func(c *conf, path string) { c.File = path },
		Validate: func(c *conf) error {
			if c.Wait <= 0 {
				return Invalid("--wait", c.Wait.String(), errors.New("must be more than 0"))
			}
			return nil
		},
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "toy.yaml")
	if err := os.WriteFile(file, []byte("name: file\nport: [1, 2]\nwait: 2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want conf
	}{
		{nil, nil, conf{Name: "x", Wait: time.Second}},
		{nil, map[string]string{"TOY_CONFIG": file}, conf{Name: "file", Wait: 2 * time.Second, Ports: []int{1, 2}, File: file}},
		{[]string{"--config", file}, map[string]string{"TOY_NAME": "env", "TOY_PORT": "3"},
			conf{Name: "env", Wait: 2 * time.Second, Ports: []int{3}, File: file}},
		{[]string{"-name", "a", "--name=b", "--verbose", "--port", "4,5", "--port", "6"}, map[string]string{"TOY_PORT": "3"},
			conf{Name: "b", Wait: time.Second, Verbose: true, Ports: []int{4, 5, 6}}},
		{[]string{"--verbose=false"}, map[string]string{"TOY_VERBOSE": "true"}, conf{Name: "x", Wait: time.Second}},
	} {
		got, err := testSpec().Load(tc.args, env(tc.env))
		if err != nil {
			t.Errorf("%v %v: %v", tc.args, tc.env, err)
			continue
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%v %v:\n got  %+v\n want %+v", tc.args, tc.env, *got, tc.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"extra"}, nil, `unexpected argument "extra": toy takes only flags (--help lists them)`},
		{[]string{"--port", "1,70000"}, nil, `invalid --port "70000": must be a port number from 0 to 65535`},
		{[]string{"--port", "1", "--port", "x"}, nil, `invalid --port "x": must be a port number from 0 to 65535`},
		{nil, map[string]string{"TOY_WAIT": "soon"}, `invalid TOY_WAIT "soon": must be a duration such as 5s or 500ms`},
		{[]string{"--wait=0s"}, nil, `invalid --wait "0s": must be more than 0`},
		{[]string{"--verbose=maybe"}, nil, `invalid --verbose "maybe": must be true or false`},
		{nil, map[string]string{"TOY_CONFIG": "missing.yaml"}, `invalid TOY_CONFIG "missing.yaml": no such file or directory`},
	} {
		_, err := testSpec().Load(tc.args, env(tc.env))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v %v: error\n got  %v\n want %s", tc.args, tc.env, err, tc.want)
		}
	}
	for _, arg := range []string{"-h", "--help"} {
		if _, err := testSpec().Load([]string{arg}, nil); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: %v, want flag.ErrHelp", arg, err)
		}
	}
	for _, args := range [][]string{{"--version"}, {"--name=y", "-version"}, {"--wait=0s", "--version"}} {
		if _, err := testSpec().Load(args, nil); !errors.Is(err, ErrVersion) {
			t.Errorf("%v: %v, want ErrVersion", args, err)
		}
	}
	file := filepath.Join(t.TempDir(), "toy.yaml")
	if err := os.WriteFile(file, []byte("name: a\nnmae: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := testSpec().Load([]string{"--config", file}, nil)
	if want := fmt.Sprintf(`%s:2: unknown key "nmae"`, file); err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

func TestUsage(t *testing.T) {
	var b bytes.Buffer
	testSpec().Usage(&b)
	want := `Usage: toy [flags]

Toy does nothing.

Every flag --some-name can also be set with the environment variable
TOY_SOME_NAME or the key some_name in the YAML file given by --config (or
TOY_CONFIG). Flags win over the environment, which wins over the file. Lists
are comma-separated; a YAML file may also use a YAML list. A list flag
marked (repeatable) adds up when given more than once.

Flags:
  --config file    YAML configuration file
  --version        print the version and exit
  --name name      a name (default "x")
  --wait duration  a wait (default "1s")
  --verbose bool   talk (default "false")

Network:
  --port list  ports (repeatable)
`
	if got := b.String(); got != want {
		t.Errorf("usage:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(b.String(), "\t") {
		t.Error("usage has tabs")
	}
}

// A structured option takes its YAML list or mapping as a node; its plain
// value, from a flag, the environment or the file, goes to Set.
func TestStructuredOption(t *testing.T) {
	type rule struct{ Allow, Deny string }
	type rconf struct {
		Rules     []rule
		RulesFile string
	}
	spec := &Spec[rconf]{
		Program: "toy", EnvPrefix: "TOY_",
		Options: []*Option[rconf]{{
			Name: "rules", Arg: "file", Usage: "rules",
			Set: String(func(c *rconf) *string { return &c.RulesFile }),
			SetNode: func(c *rconf, n *yaml.Node) error {
				for _, item := range n.Content {
					var r rule
					if err := item.Decode(&r); err != nil {
						return err
					}
					if r.Allow == "" {
						return AtLine(item.Line, errors.New("a rule needs allow"))
					}
					c.Rules = append(c.Rules, r)
				}
				return nil
			},
		}},
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	good := write("good.yaml", "rules:\n  - {allow: a}\n  - {allow: b, deny: c}\n")
	got, err := spec.Load([]string{"--config", good}, nil)
	if want := (rconf{Rules: []rule{{Allow: "a"}, {Allow: "b", Deny: "c"}}}); err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("list: got %+v, %v; want %+v", got, err, want)
	}
	scalar := write("scalar.yaml", "rules: other.yaml\n")
	got, err = spec.Load([]string{"--config", scalar}, nil)
	if want := (rconf{RulesFile: "other.yaml"}); err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("plain value: got %+v, %v; want %+v", got, err, want)
	}
	got, err = spec.Load([]string{"--rules", "flag.yaml"}, nil)
	if want := (rconf{RulesFile: "flag.yaml"}); err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("flag: got %+v, %v; want %+v", got, err, want)
	}

	// An AtLine error names its line; another error the value's first.
	bad := write("bad.yaml", "rules:\n  - {allow: a}\n  - {deny: c}\n")
	if _, err := spec.Load([]string{"--config", bad}, nil); err == nil || err.Error() != bad+":3: a rule needs allow" {
		t.Errorf("error %v, want %s:3: a rule needs allow", err, bad)
	}
	worse := write("worse.yaml", "rules:\n  - [1]\n")
	want := worse + ":2: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!seq into cliconf.rule"
	if _, err := spec.Load([]string{"--config", worse}, nil); err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

// Rows written over a part of the configuration (a group, a package's own
// options) set that part once embedded, from every source.
func TestEmbed(t *testing.T) {
	type part struct{ Wait time.Duration }
	type whole struct {
		Name string
		P    part
	}
	rows := []*Option[part]{{Name: "wait", Arg: "duration", Default: "1s", Usage: "a wait", Section: "Part",
		Set: Duration(func(p *part) *time.Duration { return &p.Wait })}}
	spec := &Spec[whole]{Program: "toy", EnvPrefix: "TOY_", Options: slices.Concat(
		[]*Option[whole]{{Name: "name", Arg: "name", Set: String(func(c *whole) *string { return &c.Name })}},
		Embed(func(c *whole) *part { return &c.P }, rows))}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{nil, nil, time.Second},
		{[]string{"--wait=3s"}, nil, 3 * time.Second},
		{nil, map[string]string{"TOY_WAIT": "4s"}, 4 * time.Second},
	} {
		got, err := spec.Load(tc.args, env(tc.env))
		if err != nil || got.P.Wait != tc.want {
			t.Errorf("%v %v: got %+v, %v; want wait %v", tc.args, tc.env, got, err, tc.want)
		}
	}
	if _, err := spec.Load([]string{"--wait=soon"}, nil); err == nil || err.Error() != `invalid --wait "soon": must be a duration such as 5s or 500ms` {
		t.Errorf("error %v", err)
	}
	var b bytes.Buffer
	spec.Usage(&b)
	if !strings.Contains(b.String(), "\nPart:\n  --wait duration  a wait (default \"1s\")\n") {
		t.Errorf("usage lacks the embedded row under its section:\n%s", b.String())
	}
}

// A one-letter alias sets its option; a flag's errors name it as the help
// does; an AsIs error is returned as it is, not as a bad value.
func TestShortFlagsAndErrors(t *testing.T) {
	type sconf struct {
		Name  string
		Marks int
	}
	spec := &Spec[sconf]{Program: "toy", EnvPrefix: "TOY_", Options: []*Option[sconf]{
		{Name: "name", Short: "n", Arg: "name", Usage: "a name", Set: String(func(c *sconf) *string { return &c.Name })},
		{Name: "mark", Arg: "bool", Bool: true, Usage: "once", Set: func(c *sconf, _ string) error {
			if c.Marks++; c.Marks > 1 {
				return AsIs(errors.New("--mark given twice: give it once"))
			}
			return nil
		}},
	}}
	if c, err := spec.Load([]string{"-n", "a"}, nil); err != nil || c.Name != "a" {
		t.Errorf("-n a: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "unknown flag --nope (--help lists them)"},
		{[]string{"-x"}, "unknown flag -x (--help lists them)"},
		{[]string{"-n"}, "--name needs a value (name)"},
		{[]string{"--mark", "--mark"}, "--mark given twice: give it once"},
	} {
		if _, err := spec.Load(tc.args, nil); err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %s", tc.args, err, tc.want)
		}
	}
	var b bytes.Buffer
	spec.Usage(&b)
	if !strings.Contains(b.String(), "\n  -n, --name name  a name\n") {
		t.Errorf("usage lacks -n:\n%s", b.String())
	}
}
