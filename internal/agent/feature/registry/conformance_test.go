package registry_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/exporter/ipfix"
	"github.com/flowlens/flowlens/internal/agent/exporter/otlp"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// root is the repository, from this package's folder.
const root = "../../../.."

// maxRegistrations is the target of docs/architecture.md ("One shape per
// kernel feature"): a new kernel feature is its folder(s), its BPF header
// and at most five one-line registrations (the BPF include, the registry,
// the proto group field, the CRD enum, the docs index). The CRD's enum is
// generated (crdgen), so a feature writes four, or five when it is on by
// default (the CRD's default list); the record model's lists are generated
// too (groupgen), and recordLines counts any such line written by hand.
const maxRegistrations = 5

// A touch is one file a feature touches: a file of its own (kind "own"),
// or one line of a shared file that registers it (kind "registration";
// Line is that line). The -v list adds the generated files (generated)
// and, for the interleaved features, their shared IPFIX block.
type touch struct {
	Kind, What, Path string
	Line             int // 1-based; registrations only
	Text             string
}

// ownFiles are the files named after the feature, in order: what a new
// feature adds. The record group and its encodings are one file each
// (pkg/flow, flowpb, OTLP, IPFIX).
func ownFiles(f feature.Feature) []touch {
	n := f.Name()
	out := []touch{
		{Kind: "own", What: "kernel side (options, plan, Fill, tests)", Path: "internal/agent/feature/" + n},
		{Kind: "own", What: "BPF header", Path: "bpf/" + n + ".h"},
		{Kind: "own", What: "record group and its JSON", Path: "pkg/flow/" + n + ".go"},
		{Kind: "own", What: "protobuf encoding", Path: "pkg/flow/flowpb/" + n + ".go"},
		{Kind: "own", What: "OTLP encoding", Path: "internal/agent/exporter/otlp/" + n + ".go"},
		{Kind: "own", What: "IPFIX encoding", Path: "internal/agent/exporter/ipfix/" + n + ".go"},
		{Kind: "own", What: "collector metrics", Path: "internal/collector/enrich/metrics_" + n + ".go"},
	}
	page, _, _ := strings.Cut(f.DocPage(), "#")
	if page == "docs/"+n+".md" {
		out = append(out, touch{Kind: "own", What: "doc page", Path: page})
	}
	return out
}

// registrations finds the one-line registrations of f in shared files.
// Each is looked up by what it must say; a missing one is returned with
// Line 0.
func registrations(f feature.Feature) []touch {
	n := f.Name()
	var out []touch
	find := func(what string, files []string, re *regexp.Regexp) {
		for _, p := range files {
			data, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				continue
			}
			for i, l := range strings.Split(string(data), "\n") {
				if re.MatchString(l) {
					out = append(out, touch{Kind: "registration", What: what, Path: p, Line: i + 1, Text: strings.TrimSpace(l)})
					return
				}
			}
		}
		where := strings.Join(files, " or ")
		if len(files) > 3 {
			where = filepath.Dir(files[0]) + "/"
		}
		out = append(out, touch{Kind: "registration", What: what, Path: where})
	}
	bpf, _ := filepath.Glob(filepath.Join(root, "bpf", "*.[ch]"))
	for i := range bpf {
		bpf[i], _ = filepath.Rel(root, bpf[i])
	}
	find("BPF include", bpf, regexp.MustCompile(`^#include "`+n+`\.h"`))
	find("registry", []string{"internal/agent/feature/registry/registry.go"}, regexp.MustCompile(`^\s+`+n+`\.New\(\),$`))
	find("proto group field", []string{"api/flow/v1/flow.proto"}, regexp.MustCompile(`^\s+[A-Z]\w* `+n+` = \d+;`))
	if f.Config().Default { // the CRD's default list; the enum itself is generated (crdgen)
		find("CRD default", []string{"api/v1alpha1/flowcollector_types.go"}, regexp.MustCompile(`\+kubebuilder:default=\{[^}]*\b`+n+`\b`))
	}
	if page, _, _ := strings.Cut(f.DocPage(), "#"); page == "docs/"+n+".md" {
		find("docs index", []string{"README.md"}, regexp.MustCompile(`\(docs/`+n+`\.md\)`))
	}
	return out
}

// generated are the files groupgen writes from the registry (make
// generate): the record model's lists of groups, each group called by name.
// A new feature touches them without writing a line.
var generated = []struct{ Path, What string }{
	{"pkg/flow/zz_generated.groups.go", "flow.Groups"},
	{"pkg/flow/record.go", "Record's embedded groups (groupgen region)"},
	{"pkg/flow/json.go", "AppendJSON's call (groupgen region)"},
	{"pkg/flow/flowpb/zz_generated.groups.go", "flowpb's groups"},
	{"pkg/flow/flowpb/wire.go", "the wire encoder's call (groupgen region)"},
	{"internal/agent/exporter/otlp/zz_generated.groups.go", "OTLP's groups"},
	{"internal/agent/exporter/otlp/encode.go", "the attributes' call (groupgen region)"},
	{"internal/agent/exporter/ipfix/zz_generated.groups.go", "IPFIX's groups and blocks"},
	{"internal/agent/exporter/ipfix/record.go", "its block's calls, when it has one (groupgen regions)"},
	{"internal/collector/enrich/metrics.go", "its metric names, registration and observe call (groupgen regions)"},
}

// A groupgen region is the lines groupgen writes inside a hand-written
// function or struct, from a line "// groupgen NAME: generated ..." to
// "// groupgen NAME: end.".
var regionBegin, regionEnd = regexp.MustCompile(`^// groupgen \w+: generated`), regexp.MustCompile(`^// groupgen \w+: end\.$`)

// recordLines finds the lines of shared Go files (not the feature's own,
// not tests, not generated files or groupgen regions) that name the
// feature's record group, its encodings' groups, its IPFIX block or variant,
// its encoders' appenders, or its collector metrics (their names, their
// struct, its register and observe calls): each is one more registration a
// new feature would write by hand.
func recordLines(t *testing.T, f feature.Feature, own []touch) []touch {
	n := f.Name()
	goName := strings.ToUpper(n[:1]) + n[1:]
	if len(n) <= 3 {
		goName = strings.ToUpper(n)
	}
	re := regexp.MustCompile(`\b(` + n + `Group|` + goName + `Fields|` + n + `Attributes|` + n + `Block|variant` + goName + `|append` + goName + `|` + n + `Metrics|` + n + `MetricNames|m\.` + n + `\.(?:register|observe))\b`)
	skip := map[string]bool{}
	for _, o := range own {
		skip[o.Path] = true
	}
	var out []touch
	for _, dir := range []string{"pkg", "internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (strings.HasSuffix(d.Name(), "test") || d.Name() == "testkit") {
				return filepath.SkipDir // test helpers (exportertest...): samples, not registrations
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			if skip[rel] || strings.HasPrefix(filepath.Base(rel), "zz_generated") || strings.HasSuffix(rel, ".pb.go") {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			inGenerated := false
			for i, l := range strings.Split(string(data), "\n") {
				c := strings.TrimSpace(l)
				if regionBegin.MatchString(c) {
					inGenerated = true
				} else if regionEnd.MatchString(c) {
					inGenerated = false
				}
				if !inGenerated && !strings.HasPrefix(c, "//") && re.MatchString(c) {
					out = append(out, touch{Kind: "registration", What: "hand-written group line", Path: rel, Line: i + 1, Text: c})
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// interleaved are the features whose IPFIX elements share the enrichment
// block (internal/agent/exporter/ipfix/enriched.go) with flowlens's own
// extra fields, interleaved as the templates have always sent them: that
// block's fields and data are written by hand. Any other feature's group
// has a block of its own, in its own file, which groupgen lists and calls.
var interleaved = []string{"drops", "rtt", "retransmits"}

// ipfixSharedBlock returns the file declaring the IPFIX block that carries
// feature name's group, when it is not the feature's own file ("" then).
func ipfixSharedBlock(t *testing.T, name string) string {
	dir := filepath.Join(root, "internal/agent/exporter/ipfix")
	own, err := os.ReadFile(filepath.Join(dir, name+".go"))
	if err != nil {
		return "" // its own file's absence is reported as such
	}
	m := regexp.MustCompile(`block:\s*&(\w+Block)\b`).FindSubmatch(own)
	if m == nil {
		t.Errorf("IPFIX: %s.go's group names no block", name)
		return ""
	}
	decl := regexp.MustCompile(`(?m)^var ` + string(m[1]) + ` = block\{`)
	if decl.Match(own) {
		return ""
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && decl.Match(data) {
			rel, _ := filepath.Rel(root, f)
			return rel
		}
	}
	t.Errorf("IPFIX: no declaration of %s", m[1])
	return ""
}

// TestFeatureConformance walks the registry: every feature has its own
// files, its registrations, at most maxRegistrations of them, its tests, its
// record group carried by every encoding (groupgen's lists current), its
// collector metrics (served and documented), its doc page and its CRD
// value. With -v it lists the files each feature
// touches: its own, its registrations and the generated ones (the list the
// issue's closing note quotes).
func TestFeatureConformance(t *testing.T) {
	crd := crdFeatures(t)
	for _, f := range registry.New() {
		t.Run(f.Name(), func(t *testing.T) {
			var lines []string
			for _, o := range ownFiles(f) {
				if _, err := os.Stat(filepath.Join(root, o.Path)); err != nil {
					t.Errorf("missing its %s: %s", o.What, o.Path)
				}
				lines = append(lines, fmt.Sprintf("  own           %-44s %s", o.Path, o.What))
			}
			regs := append(registrations(f), recordLines(t, f, ownFiles(f))...)
			count := 0
			for _, r := range regs {
				if r.Line == 0 {
					t.Errorf("missing its %s in %s", r.What, r.Path)
				}
				count++
				lines = append(lines, fmt.Sprintf("  registration  %s:%d  %s: %s", r.Path, r.Line, r.What, r.Text))
			}
			if shared := ipfixSharedBlock(t, f.Name()); shared != "" {
				if !slices.Contains(interleaved, f.Name()) {
					t.Errorf("IPFIX: its group is in the block of %s; a feature's block is its own (only %v share one)", shared, interleaved)
				}
				lines = append(lines, fmt.Sprintf("  shared block  %-44s IPFIX elements interleaved with the core's (hand-written, existing wire format)", shared))
			}
			if count > maxRegistrations {
				t.Errorf("%d one-line registrations, over the target of %d", count, maxRegistrations)
			}
			if tests, _ := filepath.Glob(filepath.Join(root, "internal/agent/feature", f.Name(), "*_test.go")); len(tests) == 0 {
				t.Errorf("no tests in internal/agent/feature/%s: a feature's tests live beside it (internal/testkit/agenttest)", f.Name())
			}
			checkEncodings(t, f)
			checkMetrics(t, f)
			checkDocPage(t, f)
			if !slices.Contains(crd.Enum, f.Name()) {
				t.Errorf("the CRD's features enum %v lacks %s: run make generate", crd.Enum, f.Name())
			}
			lines = append(lines, "  generated     api/v1alpha1/zz_generated.features.go, config/crd/bases (make generate): CRD enum value")
			for _, g := range generated {
				lines = append(lines, fmt.Sprintf("  generated     %-44s %s (make generate)", g.Path, g.What))
			}
			t.Logf("feature %s touches:\n%s", f.Name(), strings.Join(lines, "\n"))
		})
	}
	// groupgen's lists are the registry's, in its order (make generate).
	var groups []string
	for _, g := range flow.Groups {
		groups = append(groups, g.Name)
	}
	if !slices.Equal(groups, registry.Names()) {
		t.Errorf("flow.Groups %v, registry %v (run make generate)", groups, registry.Names())
	}
	// The CRD's enum and default are the registry's, in its order.
	var defaults []string
	for _, f := range registry.New() {
		if f.Config().Default {
			defaults = append(defaults, f.Name())
		}
	}
	if !slices.Equal(crd.Enum, registry.Names()) || !slices.Equal(crd.Default, defaults) {
		t.Errorf("CRD features: enum %v default %v; registry: %v default %v (run make generate)", crd.Enum, crd.Default, registry.Names(), defaults)
	}
	var generated []string
	for _, d := range v1alpha1.DefaultFeatures {
		generated = append(generated, string(d))
	}
	if !slices.Equal(generated, defaults) {
		t.Errorf("v1alpha1.DefaultFeatures %v, registry defaults %v (run make generate)", generated, defaults)
	}
}

// checkEncodings: the feature's record group exists (pkg/flow), holds
// exactly the JSON fields the feature says it fills, and a record carrying
// it comes out of the JSON, protobuf, OTLP and IPFIX encodings with the
// group's fields, looked up by the feature's name in each.
func checkEncodings(t *testing.T, f feature.Feature) {
	g, ok := flow.GroupNamed(f.Name())
	if !ok {
		t.Errorf("no record group %q in pkg/flow (flow.Groups)", f.Name())
		return
	}
	if !slices.Equal(g.JSONFields, f.Fields()) {
		t.Errorf("record group's JSON fields %v, the feature fills %v", g.JSONFields, f.Fields())
	}
	r := flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.2"), Sampling: 1}
	g.Sample(&r)
	js := string(r.AppendJSON(nil))
	for _, k := range g.JSONFields {
		if !strings.Contains(js, `"`+k+`":`) {
			t.Errorf("JSON of a record with the group lacks %q: %s", k, js)
		}
	}
	if fd, ok := flowpb.GroupField(f.Name()); !ok || fd.Message() == nil {
		t.Errorf("protobuf: no message field %q of Flow (flowpb.GroupField)", f.Name())
	}
	if keys, ok := otlp.GroupAttributes(f.Name(), &r); !ok || len(keys) == 0 {
		t.Errorf("OTLP: group %q encodes %v (%v)", f.Name(), keys, ok)
	}
	if ids, ok := ipfix.GroupElements(f.Name(), &r); !ok || len(ids) == 0 {
		t.Errorf("IPFIX: group %q exports %v (%v)", f.Name(), ids, ok)
	}
}

// checkMetrics: the feature has collector metrics (the names its
// metrics_NAME.go registers), each one the collector serves (a name of
// enrich.FlowMetricNames, which --metrics chooses from) and a row of
// docs/metrics.md's tables.
func checkMetrics(t *testing.T, f feature.Feature) {
	names := enrich.FeatureMetrics(f.Name())
	if len(names) == 0 {
		t.Errorf("no collector metrics (internal/collector/enrich/metrics_%s.go registers none)", f.Name())
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !slices.Contains(enrich.FlowMetricNames, n) {
			t.Errorf("metric %s is registered but not in enrich.FlowMetricNames: never served (run make generate, list it in %sMetricNames)", n, f.Name())
		}
		if !strings.Contains(string(doc), "\n| `"+n+"` |") {
			t.Errorf("metric %s has no row in docs/metrics.md", n)
		}
	}
}

// checkDocPage: the page exists, and the section, when one is named, is a
// heading of it (as GitHub spells its anchor).
func checkDocPage(t *testing.T, f feature.Feature) {
	page, section, _ := strings.Cut(f.DocPage(), "#")
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Errorf("doc page: %v", err)
		return
	}
	if section == "" {
		return
	}
	for _, l := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(l, "#"); ok && anchor(strings.TrimLeft(h, "#")) == section {
			return
		}
	}
	t.Errorf("doc page %s: no heading with anchor #%s", page, section)
}

// anchor is a heading's GitHub anchor: lower case, spaces to dashes, and
// only letters, digits, dashes and underscores kept.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// crdFeatures reads spec.agent.features from the generated CRD.
func crdFeatures(t *testing.T) (out struct{ Enum, Default []string }) {
	data, err := os.ReadFile(filepath.Join(root, "config/crd/bases/flowlens.io_flowcollectors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties struct {
									Agent struct {
										Properties struct {
											Features struct {
												Default []string
												Items   struct{ Enum []string }
											}
										}
									}
								}
							}
						}
					} `yaml:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD: %v, %d versions", err, len(crd.Spec.Versions))
	}
	feats := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties.Agent.Properties.Features
	out.Enum, out.Default = feats.Items.Enum, feats.Default
	if len(out.Enum) == 0 {
		t.Fatal("CRD: no spec.agent.features enum")
	}
	return out
}
