package ipfixsize

import "testing"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		n         int
		transport string
		want      string
	}{
		{0, "udp", ""},
		{Min, "", ""},
		{MaxUDP, "udp", ""},
		{MaxUDP + 1, "udp", "must be 0 (the default) or from 1024 to 65507 over udp"},
		{MaxUDP + 1, "", "must be 0 (the default) or from 1024 to 65507 over udp"},
		{Max, "tcp", ""},
		{Max + 1, "tcp", "must be 0 (the default) or from 1024 to 65535 over tcp"},
		{Min - 1, "tcp", "must be 0 (the default) or from 1024 to 65535 over tcp"},
	} {
		err := Check(tc.n, tc.transport)
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("Check(%d, %q) = %q, want %q", tc.n, tc.transport, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("Check(%d, %q) = nil, want %q", tc.n, tc.transport, tc.want)
		}
	}
}
