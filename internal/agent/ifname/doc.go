// Package ifname matches interface names against a list of entries, each an
// exact name or a /regex/ pattern: the syntax of --interfaces,
// --exclude-interfaces and a filter rule's interfaces. It lives apart from
// the agent's configuration so that every place that reads the syntax
// (internal/agent/config, internal/agent/flowrules) parses it the same way.
package ifname
