package testkit

import (
	"net"
	"testing"
)

// FreeAddr is a loopback TCP address whose port is free now, for a server
// that must be given its address before it binds it (or bound twice).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
