// Package config holds the agent's single configuration struct, Config, and
// everything that fills it in: defaults, an optional YAML file, FLOWLENS_AGENT_*
// environment variables and command-line flags, in that order of precedence.
// It also holds Validate, which rejects bad settings with an error naming the
// flag at fault; InterfaceSelection, which applies the --interfaces and
// --exclude-interfaces lists to interface names; and the flow filter rules
// (--filter-rules, the file's inline filter_rules, --filter-default), parsed
// by package flowrules and compiled by Config.FilterTable.
//
// Every option is defined once, in the options table; its flag name gives the
// environment variable (FLOWLENS_AGENT_CACHE_ACTIVE_TIMEOUT for
// --cache-active-timeout) and the YAML key (cache_active_timeout), so the three
// spellings cannot drift apart. The help lists the options by component
// (sections); the exporters' TLS and Kafka connection rows are groups shared
// with the collector (package cliconf). The optional kernel features are not
// listed here: the feature registry (internal/agent/feature/registry) hands
// them over (SetFeatures, features.go), and with them --features' default
// and usage and each feature's own rows (e.g. --dns-ports), which its package
// owns; Config.Features names the enabled ones and Config.FeatureOptions
// keeps their options.
//
// The Default* constants are the defaults the operator also writes when it
// renders this configuration from a FlowCollector: internal/operator/render
// imports them, so each is written once, here. The operator links this
// package, so it imports no exporter and nothing of the kernel side (make
// check-layers).
package config
