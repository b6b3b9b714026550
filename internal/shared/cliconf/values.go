package cliconf

import (
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Setters for the common kinds of value. Each takes a function returning the
// field to set, e.g. cliconf.Duration(func(c *Config) *time.Duration { return
// &c.Timeout }), and returns an Option.Set. They check only the syntax; ranges
// belong to Spec.Validate, which names the flag whatever the source.

// String sets a string field as given.
func String[C any](field func(*C) *string) func(*C, string) error {
	return func(c *C, s string) error { *field(c) = s; return nil }
}

// Duration parses time.ParseDuration syntax.
func Duration[C any](field func(*C) *time.Duration) func(*C, string) error {
	return func(c *C, s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("must be a duration such as 5s or 500ms")
		}
		*field(c) = d
		return nil
	}
}

// Int parses a decimal integer.
func Int[C any](field func(*C) *int) func(*C, string) error {
	return func(c *C, s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("must be an integer")
		}
		*field(c) = n
		return nil
	}
}

// OnOff parses "on" or "off", in any case.
func OnOff[C any](field func(*C) *bool) func(*C, string) error {
	return func(c *C, s string) error {
		switch strings.ToLower(s) {
		case "on":
			*field(c) = true
		case "off":
			*field(c) = false
		default:
			return errors.New("must be on or off")
		}
		return nil
	}
}

// Bool parses "true" or "false" (and strconv.ParseBool's other spellings:
// 1, 0, t, f...), for Option.Bool flags given as --name or --name=false.
func Bool[C any](field func(*C) *bool) func(*C, string) error {
	return func(c *C, s string) error {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("must be true or false")
		}
		*field(c) = b
		return nil
	}
}

// levels are the log levels a user may name; slog accepts more (e.g.
// "info+2"), which would only confuse.
var levels = []struct {
	name  string
	level slog.Level
}{{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}}

// LevelNames lists the log levels Level accepts.
const LevelNames = "debug, info, warn, error"

// Level parses a log level: debug, info, warn or error, in any case.
func Level[C any](field func(*C) *slog.Level) func(*C, string) error {
	return func(c *C, s string) error {
		for _, l := range levels {
			if strings.EqualFold(s, l.name) {
				*field(c) = l.level
				return nil
			}
		}
		return errors.New("must be one of " + LevelNames)
	}
}

// CheckLevel returns an error naming flagName unless l is one of LevelNames.
func CheckLevel(flagName string, l slog.Level) error {
	for _, x := range levels {
		if l == x.level {
			return nil
		}
	}
	return Invalid(flagName, l.String(), errors.New("must be one of "+LevelNames))
}

// CheckRange returns an error naming flagName unless lo <= v <= hi.
func CheckRange(flagName string, v, lo, hi int) error {
	if v < lo || v > hi {
		return Invalid(flagName, strconv.Itoa(v), errors.New("must be from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi)))
	}
	return nil
}

// SplitHostPort returns net.SplitHostPort's reason without the address,
// which the caller's message already shows.
func SplitHostPort(addr string) error {
	_, _, err := net.SplitHostPort(addr)
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return errors.New(ae.Err)
	}
	return err
}

// CheckListenAddress returns an error naming flagName unless addr is a
// host:port to listen on, the port a number from 0 to 65535 (0: any free
// port) and the host empty (every address), a name or an IP address.
func CheckListenAddress(flagName, addr string) error {
	if err := SplitHostPort(addr); err != nil {
		return Invalid(flagName, addr, errors.New("must be host:port, e.g. :9990 or 127.0.0.1:9990: "+err.Error()))
	}
	_, port, _ := net.SplitHostPort(addr)
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return Invalid(flagName, addr, errors.New("port must be a number from 0 to 65535"))
	}
	return nil
}

// Loopback reports whether addr (host:port, or a host) names only loopback
// addresses: "localhost", or a loopback IP address. An empty host (every
// address), any other name or an unparsable address is not loopback: the
// checks that call it refuse plaintext off the machine, so a doubt refuses.
func Loopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SplitList splits a comma-separated list, trimming spaces and dropping empty
// entries. An entry that starts with "/" runs to the next "/" that ends an
// entry, so a regex such as /^eth[0-9]{1,2}$/ keeps its comma.
func SplitList(s string) []string {
	var items []string
	for s != "" {
		s = strings.TrimLeft(s, " \t")
		end := strings.IndexByte(s, ',')
		if strings.HasPrefix(s, "/") {
			if e := patternEnd(s); e >= 0 {
				end = e
			}
		}
		item := s
		if end >= 0 && end < len(s) {
			item, s = s[:end], s[end+1:]
		} else {
			s = ""
		}
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// patternEnd returns the index of the comma (or len(s)) after the "/" closing
// the pattern at the start of s, or -1 if no "/" closes it.
func patternEnd(s string) int {
	for i := 1; i < len(s); i++ {
		if s[i] != '/' {
			continue
		}
		rest := strings.TrimLeft(s[i+1:], " \t")
		if rest == "" {
			return len(s)
		}
		if rest[0] == ',' {
			return len(s) - len(rest)
		}
	}
	return -1
}
