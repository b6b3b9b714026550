package main

import (
	"slices"
	"strings"
	"testing"
)

// TestScaleExportList: -scale-exports and -scale-rounds are checked before
// the benchmark starts, with errors that name the flag.
func TestScaleExportList(t *testing.T) {
	for _, tc := range []struct {
		o    options
		want []string
		err  string // "" = ok
	}{
		{options{export: "grpc", collBin: "c", scaleRounds: 1}, []string{"grpc"}, ""},
		{options{export: "stdout", scaleRounds: 1}, []string{"stdout"}, ""},
		{options{scaleExports: "grpc,stdout", collBin: "c", scaleRounds: 3}, []string{"grpc", "stdout"}, ""},
		{options{scaleExports: "grpc", scaleRounds: 1}, nil, "-scale-exports grpc needs -collector"},
		{options{scaleExports: "stdout,kafka", scaleRounds: 1}, nil, `-scale-exports "kafka": want a list of`},
		{options{scaleExports: "stdout,stdout", scaleRounds: 1}, nil, "stdout twice"},
		{options{export: "stdout", scaleRounds: 0}, nil, "-scale-rounds 0: want at least 1"},
	} {
		got, err := tc.o.scaleExportList()
		if tc.err == "" && (err != nil || !slices.Equal(got, tc.want)) {
			t.Errorf("%+v: got %v, %v; want %v", tc.o, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: error %v, want one with %q", tc.o, err, tc.err)
		}
	}
}
