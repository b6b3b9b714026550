package main

import (
	"errors"
	"flag"
	"testing"
)

func TestFlags(t *testing.T) {
	if err := run([]string{"--version"}); err != nil {
		t.Errorf("--version: %v", err)
	}
	if err := run([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp (main exits 0 on it)", err)
	}
	if err := run([]string{"--no-such-flag"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
}
