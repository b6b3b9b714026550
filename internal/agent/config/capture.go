package config

import (
	"errors"
	"strconv"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// The defaults of --capture and --capture-max-snaplen, which the operator's
// spec.agent.capture.enable and .maxSnaplen also have. 128 bytes hold a
// packet's headers (Ethernet, IPv6 with some extension headers, TCP with
// options) but little or no payload, which is more sensitive than flows.
const (
	DefaultCapture           = true
	DefaultCaptureMaxSnaplen = 128
)

// captureOptions are the options of on-demand packet capture
// (docs/capture.md): whether the agent accepts capture requests, and the
// most bytes of a packet it copies.
var captureOptions = []*cliconf.Option[Config]{
	{Name: "capture", Arg: "bool", Default: strconv.FormatBool(DefaultCapture), Bool: true,
		Usage: "accept capture requests (flowlens capture, docs/capture.md); false refuses them with an error saying capture is disabled on this agent",
		Set:   cliconf.Bool(func(c *Config) *bool { return &c.Capture })},
	{Name: "capture-max-snaplen", Arg: "bytes", Default: itoa(DefaultCaptureMaxSnaplen),
		Usage: "most bytes copied of a captured packet (1 to 65535); a request asking more is clamped to it, and its result says so",
		Set:   setCaptureMaxSnaplen},
}

func setCaptureMaxSnaplen(c *Config, s string) error {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return errors.New("must be an integer from 1 to 65535")
	}
	c.CaptureMaxSnaplen = uint32(n)
	return nil
}
