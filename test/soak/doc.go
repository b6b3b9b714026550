//go:build soak

// Package soak is flowlens run for an hour (`make soak`, build tag soak; not
// in CI): the real agent and collector binaries on a lab of network
// namespaces, with mixed traffic and namespaces (and their veths) created
// and deleted all along. Every 10 s it samples the processes' memory,
// goroutines, open files and BPF objects; at the end each series' slope over
// the last three quarters of the run must be flat (slope.go says what flat
// means). The figures and the plot of a run are in docs/benchmarks.md.
//
// Every file carries the build tag, so the package is not part of `go list
// ./...` nor of `make test`; `make soak` runs the analysis's own tests
// (TestFit*) before the hour.
package soak
