//go:build tools

// Package tools pins kube-burner's command in this module's go.mod.
package tools

import _ "github.com/kube-burner/kube-burner/cmd/kube-burner"
