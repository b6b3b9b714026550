package netlab

import (
	"errors"
	"fmt"
	"slices"
)

// T is what the helpers need of their caller: a test's testing.TB, or a
// Script for programs (the benchmarks) that build the same labs.
type T interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// A Script is the T of a program that builds a lab outside a test (the live
// benchmarks, hack/bench/live): Build turns the first helper failure into
// its error, and Close tears down what the helpers created, the last first,
// as a test's cleanups would.
type Script struct {
	cleanups []func()
	errs     []error // Errorf: cleanup failures, reported by Close
}

// scriptFailure carries a Fatal out of the helper to Build.
type scriptFailure struct{ err error }

func (s *Script) Helper()          {}
func (s *Script) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }
func (s *Script) Errorf(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf(format, args...))
}
func (s *Script) Fatal(args ...any) { panic(scriptFailure{errors.New(fmt.Sprint(args...))}) }
func (s *Script) Fatalf(format string, args ...any) {
	panic(scriptFailure{fmt.Errorf(format, args...)})
}

// Build runs build with s as its T and returns the first failure of a
// helper it calls; what was built until then stays, for Close.
func (s *Script) Build(build func(t T)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(scriptFailure)
			if !ok {
				panic(r)
			}
			err = f.err
		}
	}()
	build(s)
	return nil
}

// Close tears the lab down, the last thing created first, and returns the
// errors met on the way.
func (s *Script) Close() error {
	for _, f := range slices.Backward(s.cleanups) {
		f()
	}
	s.cleanups = nil
	err := errors.Join(s.errs...)
	s.errs = nil
	return err
}
