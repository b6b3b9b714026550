package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Model is what the tests and the renderer read back from a dashboard's
// JSON: its variables and every panel's queries, in panel order.
type Model struct {
	UID       string     `json:"uid"`
	Title     string     `json:"title"`
	Variables []Variable `json:"variables"`
	Panels    []Panel    `json:"panels"`
}

// Variable is one templating variable.
type Variable struct {
	Name     string `json:"name"`
	Type     string `json:"type"`  // query, custom, datasource
	Query    string `json:"query"` // label_values(...) or the custom values
	Multi    bool   `json:"multi"`
	AllValue string `json:"allValue,omitempty"`
	Current  string `json:"current"` // the current value ("$__all" for All)
}

// Panel is one panel (rows are not panels; Row names the row above it).
type Panel struct {
	ID      int      `json:"id"`
	Title   string   `json:"title"`
	Type    string   `json:"type"` // timeseries, stat, bargauge, table
	Row     string   `json:"row"`
	Unit    string   `json:"unit"`
	Stacked bool     `json:"stacked,omitempty"`
	GridPos GridPos  `json:"gridPos"`
	Targets []Target `json:"targets"`
}

// GridPos is a panel's place on the 24-column grid.
type GridPos struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// Target is one query of a panel.
type Target struct {
	RefID   string `json:"refId"`
	Expr    string `json:"expr"`
	Legend  string `json:"legendFormat"`
	Instant bool   `json:"instant"`
}

// Parse reads the model back from a dashboard's JSON.
func Parse(js []byte) (*Model, error) {
	var raw struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name     string          `json:"name"`
				Type     string          `json:"type"`
				Query    json.RawMessage `json:"query"`
				Multi    bool            `json:"multi"`
				AllValue string          `json:"allValue"`
				Current  struct {
					Value json.RawMessage `json:"value"`
				} `json:"current"`
			} `json:"list"`
		} `json:"templating"`
		Panels []rawPanel `json:"panels"`
	}
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, err
	}
	m := &Model{UID: raw.UID, Title: raw.Title}
	for _, v := range raw.Templating.List {
		q, err := stringOf(v.Query)
		if err != nil {
			return nil, fmt.Errorf("variable %s: query: %w", v.Name, err)
		}
		cur, err := stringOf(v.Current.Value)
		if err != nil {
			return nil, fmt.Errorf("variable %s: current: %w", v.Name, err)
		}
		m.Variables = append(m.Variables, Variable{Name: v.Name, Type: v.Type, Query: q, Multi: v.Multi, AllValue: v.AllValue, Current: cur})
	}
	row := ""
	var walk func([]rawPanel)
	walk = func(ps []rawPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				row = p.Title
				walk(p.Panels) // collapsed rows hold their panels
				continue
			}
			mp := Panel{ID: p.ID, Title: p.Title, Type: p.Type, Row: row, Unit: p.FieldConfig.Defaults.Unit,
				Stacked: p.FieldConfig.Defaults.Custom.Stacking.Mode == "normal", GridPos: p.GridPos}
			for _, t := range p.Targets {
				mp.Targets = append(mp.Targets, Target{RefID: t.RefID, Expr: t.Expr, Legend: t.Legend, Instant: t.Instant})
			}
			m.Panels = append(m.Panels, mp)
		}
	}
	walk(raw.Panels)
	return m, nil
}

type rawPanel struct {
	ID          int        `json:"id"`
	Type        string     `json:"type"`
	Title       string     `json:"title"`
	GridPos     GridPos    `json:"gridPos"`
	Panels      []rawPanel `json:"panels"`
	Targets     []Target   `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit   string `json:"unit"`
			Custom struct {
				Stacking struct {
					Mode string `json:"mode"`
				} `json:"stacking"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// stringOf reads a JSON string, or the first string of an array.
func stringOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", err
	}
	if len(list) == 0 {
		return "", nil
	}
	return list[0], nil
}

// Values returns what each variable stands for when the dashboard opens:
// AllValue for a multi-value variable on All, the current value otherwise.
// The data source variable is left out (it is not part of a query).
func (m *Model) Values() map[string]string {
	out := map[string]string{}
	for _, v := range m.Variables {
		switch {
		case v.Type == "datasource":
		case v.Current == "$__all" || (v.Multi && v.Current == ""):
			out[v.Name] = v.AllValue
		default:
			out[v.Name] = v.Current
		}
	}
	return out
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\[\[([A-Za-z0-9_]+)\]\]|\$([A-Za-z0-9_]+)`)

// VarRefs returns the names of the variables expr refers to ($x, ${x}, [[x]]).
func VarRefs(expr string) []string {
	seen := map[string]bool{}
	for _, m := range varRef.FindAllStringSubmatch(expr, -1) {
		seen[m[1]+m[2]+m[3]] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Expand substitutes variables in expr as Grafana does before sending a
// query; a variable missing from vars is an error.
func Expand(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("undefined variables %s in %q", strings.Join(missing, ", "), expr)
	}
	return out, nil
}

var legendRef = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_]+)\s*\}\}`)

// Legend formats a series' name from a Grafana legend format and its labels.
func Legend(format string, labels map[string]string) string {
	if format == "" || format == "__auto" {
		parts := make([]string, 0, len(labels))
		for k, v := range labels {
			if k != "__name__" {
				parts = append(parts, k+"="+v)
			}
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return legendRef.ReplaceAllStringFunc(format, func(ref string) string {
		return labels[legendRef.FindStringSubmatch(ref)[1]]
	})
}
