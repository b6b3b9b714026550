package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/nodegraph"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The dashboards are written as a small declarative spec (spec.go,
// traffic.go, drops.go, health.go) and turned into Grafana's dashboard
// model with the Grafana Foundation SDK here, so every JSON field comes from
// Grafana's own schema types and the SDK's validation runs on each build.

// kind is a panel's visualization.
type kind int

const (
	timeSeries kind = iota // lines over time
	stacked                // stacked areas over time
	statValue              // one big number (last value), with a sparkline
	barGauge               // horizontal bars, one per series, instant query
	tableView              // a table of series, instant query
	nodeGraph              // Grafana's Node Graph: a nodes query (id) and an edges query (id, source, target), instant
)

// query is one PromQL expression of a panel.
type query struct {
	Expr   string
	Legend string // Grafana legend format, e.g. "{{src_namespace}}"
}

// panel is one panel of the spec.
type panel struct {
	Title       string
	Description string
	Kind        kind
	Unit        string
	Width       uint32 // of 24 columns
	Height      uint32
	Queries     []query
	Min         *float64
	Max         *float64
}

// row is a titled group of panels laid out left to right, wrapping at 24.
type row struct {
	Title  string
	Panels []panel
}

// variable is a dashboard variable of the spec.
type variable struct {
	Name, Label string
	// Query: label_values(...) for a query variable; Custom: comma list.
	Query, Custom string
	Default       string // Custom only: the current value
	Multi         bool   // multi-select with an "All" option meaning AllValue
	Description   string
}

// AllValue is what "All" of a multi-value variable becomes in a query: every
// value, the empty one included (flows outside Kubernetes have
// src_namespace="").
const AllValue = ".*"

// spec is one dashboard.
type spec struct {
	File        string // manifests/dashboards/<File>
	UID         string
	Title       string
	Description string
	Tags        []string
	Variables   []variable
	Rows        []row
}

// DatasourceVar is the name of every dashboard's Prometheus data source
// variable; panels and variable queries use "${datasource}".
const DatasourceVar = "datasource"

func promRef() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + DatasourceVar + "}")}
}

// build turns a spec into the SDK's dashboard model.
func build(s spec) (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder(s.Title).
		Uid(s.UID).
		Description(s.Description).
		Tags(s.Tags).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Link(dashboard.NewDashboardLinkBuilder("flowlens").
			Type(dashboard.DashboardLinkTypeDashboards).
			Icon("external link").
			Tags([]string{"flowlens"}).
			AsDropdown(true).
			IncludeVars(true).
			KeepTime(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder(DatasourceVar).
			Label("Data source").
			Type("prometheus"))
	for _, v := range s.Variables {
		if v.Custom != "" {
			b.WithVariable(dashboard.NewCustomVariableBuilder(v.Name).
				Label(v.Label).
				Description(v.Description).
				Values(dashboard.StringOrMap{String: cog.ToPtr(v.Custom)}).
				Current(dashboard.VariableOption{
					Selected: cog.ToPtr(true),
					Text:     dashboard.StringOrArrayOfString{String: cog.ToPtr(v.Default)},
					Value:    dashboard.StringOrArrayOfString{String: cog.ToPtr(v.Default)},
				}))
			continue
		}
		qv := dashboard.NewQueryVariableBuilder(v.Name).
			Label(v.Label).
			Description(v.Description).
			Query(dashboard.StringOrMap{String: cog.ToPtr(v.Query)}).
			Definition(v.Query).
			Datasource(promRef()).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc)
		if v.Multi {
			qv.Multi(true).IncludeAll(true).AllValue(AllValue).
				Current(dashboard.VariableOption{
					Selected: cog.ToPtr(true),
					Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
					Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
				})
		}
		b.WithVariable(qv)
	}
	id := uint32(0)
	for _, r := range s.Rows {
		id++
		b.WithRow(dashboard.NewRowBuilder(r.Title).Id(id))
		for _, p := range r.Panels {
			id++
			pb, err := panelBuilder(p, id)
			if err != nil {
				return dashboard.Dashboard{}, fmt.Errorf("%s: panel %q: %w", s.Title, p.Title, err)
			}
			b.WithPanel(pb)
		}
	}
	return b.Build()
}

func target(q query, refID string, instant bool) *prometheus.DataqueryBuilder {
	t := prometheus.NewDataqueryBuilder().
		Expr(q.Expr).
		LegendFormat(q.Legend).
		RefId(refID).
		Datasource(promRef()).
		EditorMode(prometheus.QueryEditorModeCode)
	if instant {
		t.Instant().Format(prometheus.PromQueryFormatTable)
	} else {
		t.Range()
	}
	return t
}

func refID(i int) string { return string(rune('A' + i)) }

func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().
		DisplayMode(common.LegendDisplayModeTable).
		Placement(common.LegendPlacementRight).
		ShowLegend(true).
		Calcs([]string{"mean", "max", "lastNotNull"}).
		SortBy("Mean").
		SortDesc(true)
}

func panelBuilder(p panel, id uint32) (cog.Builder[dashboard.Panel], error) {
	if len(p.Queries) == 0 {
		return nil, fmt.Errorf("no query")
	}
	if len(p.Queries) > 26 {
		return nil, fmt.Errorf("%d queries", len(p.Queries))
	}
	w, h := p.Width, p.Height
	if w == 0 {
		w = 12
	}
	if h == 0 {
		h = 8
	}
	switch p.Kind {
	case timeSeries, stacked:
		pb := timeseries.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(promRef()).Unit(p.Unit).Span(w).Height(h).
			LineWidth(1).FillOpacity(10).ShowPoints(common.VisibilityModeNever).
			Legend(legend()).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
		if p.Kind == stacked {
			pb.FillOpacity(60).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
		}
		if p.Min != nil {
			pb.Min(*p.Min)
		}
		if p.Max != nil {
			pb.Max(*p.Max)
		}
		for i, q := range p.Queries {
			pb.WithTarget(target(q, refID(i), false))
		}
		return pb, nil
	case statValue:
		pb := stat.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(promRef()).Unit(p.Unit).Span(w).Height(h).
			GraphMode(common.BigValueGraphModeArea).ColorMode(common.BigValueColorModeValue).
			Orientation(common.VizOrientationAuto).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
		for i, q := range p.Queries {
			pb.WithTarget(target(q, refID(i), false))
		}
		return pb, nil
	case barGauge:
		pb := bargauge.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(promRef()).Unit(p.Unit).Span(w).Height(h).
			Orientation(common.VizOrientationHorizontal).
			DisplayMode(common.BarGaugeDisplayModeGradient).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
		for i, q := range p.Queries {
			pb.WithTarget(target(q, refID(i), true))
		}
		return pb, nil
	case tableView:
		pb := table.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(promRef()).Unit(p.Unit).Span(w).Height(h).
			WithTransformation(dashboard.DataTransformerConfig{
				Id:      "organize",
				Options: map[string]any{"excludeByName": map[string]any{"Time": true}},
			})
		for i, q := range p.Queries {
			pb.WithTarget(target(q, refID(i), true))
		}
		return pb, nil
	case nodeGraph:
		// The value column of each instant table is the node's or the
		// edge's main statistic.
		pb := nodegraph.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(promRef()).Unit(p.Unit).Span(w).Height(h).
			WithTransformation(dashboard.DataTransformerConfig{
				Id: "organize",
				Options: map[string]any{"excludeByName": map[string]any{"Time": true},
					"renameByName": map[string]any{"Value": "mainstat", "Value #A": "mainstat", "Value #B": "mainstat"}},
			})
		for i, q := range p.Queries {
			pb.WithTarget(target(q, refID(i), true))
		}
		return pb, nil
	}
	return nil, fmt.Errorf("unknown panel kind %d", p.Kind)
}
