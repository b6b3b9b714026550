// Package capture copies packets on demand (issue #32, `flowlens capture`):
// while a capture runs, a separate TC program, attached beside the flow
// programs on the interfaces the agent watches and detached when the capture
// ends, matches packets against a Filter in the kernel and copies their first
// Limits.Snaplen bytes through a bounded ring; with no capture running
// nothing of it is loaded or attached, so the flow programs' per-packet cost
// is unchanged. Packets the ring or the consumer could not take are counted
// by reason in Result.NotCaptured, never dropped silently.
//
// This file is the contract between the kernel side (this package) and its
// callers (the agent's control stream to the collector); docs/capture.md
// describes the feature end to end.
package capture

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// Direction of a captured packet, as seen by the hook that copied it.
type Direction uint8

const (
	// AnyDirection, in a Filter: both.
	AnyDirection Direction = 0
	Ingress      Direction = 1
	Egress       Direction = 2
)

// Filter is what the kernel matches, already resolved to addresses (names
// such as namespaces and pods are resolved by the collector). Every set
// field must match (AND); a list matches when any of its values does (OR).
// A zero Filter matches every packet.
type Filter struct {
	// Either end (CIDRs), source, destination.
	CIDRs, SrcCIDRs, DstCIDRs []netip.Prefix
	// Either end, source, destination ports (TCP, UDP, SCTP).
	Ports, SrcPorts, DstPorts []uint16
	// IP protocol numbers.
	Protocols []uint8
	// TCP packets having all the bits of one of these masks (SYN 0x02...).
	TCPFlags []uint16
	// Direction of the hook.
	Direction Direction
	// Interface names; empty: every watched interface.
	Interfaces []string
}

// Limits end a capture: whichever is reached first.
type Limits struct {
	// Bytes copied per packet (the agent clamps it to --capture-max-snaplen).
	Snaplen uint32
	// 0: no bound on packets / on captured bytes.
	MaxPackets, MaxBytes uint64
	// 0: until the context ends.
	Duration time.Duration
}

// Packet is one copied packet.
type Packet struct {
	// Time the hook saw it (wall clock).
	Time time.Time
	// Where: the same names and ids as a flow record's interfaces.
	Interface string
	Ifindex   uint32
	Netns     string
	NetnsID   uint64
	Direction Direction
	// WireLen is the packet's length on the wire; len(Data) <= Snaplen.
	WireLen uint32
	Data    []byte
}

// Result says how a capture ended.
type Result struct {
	// Packets and bytes (of Data) handed to the consumer.
	Packets, Bytes uint64
	// Matching packets not handed over, by reason ("ring_full": the
	// kernel ring was full; "consumer": the consumer was too slow...).
	NotCaptured map[string]uint64
	// Why it ended: "max_packets", "max_bytes", "duration", "canceled".
	Reason string
	// Snaplen is the snaplen applied; SnaplenClamped: the request asked
	// more than --capture-max-snaplen (or 0), so it got that. Not a loss.
	Snaplen        uint32
	SnaplenClamped bool
}

// Config is what New needs: the agent's options and its datapath.
type Config struct {
	// Enabled is --capture: false refuses every capture (ErrDisabled).
	Enabled bool
	// MaxSnaplen is --capture-max-snaplen: a request asking more (or 0)
	// gets this, and Result.SnaplenClamped says so.
	MaxSnaplen uint32
	// Datapath is the agent's: a capture hooks the interfaces its flow
	// programs are attached to (every watched interface, in every watched
	// namespace), beside them.
	Datapath *datapath.Datapath
	// RingBytes is the size of each CPU's ring (a power-of-two number of
	// pages; default 256 KiB: about 1400 packets of 128 bytes per CPU).
	RingBytes int
	// QueueLen is how many packets wait between the ring and emit
	// (default 4096); a packet that finds it full is "consumer".
	QueueLen int
	Logger   *slog.Logger
}

// Errors of Run a caller tells the user about.
var (
	// ErrDisabled: the agent runs with --capture=false.
	ErrDisabled = errors.New("packet capture is disabled on this agent (--capture=false)")
	// ErrNoInterface: no watched interface matches the filter's
	// interfaces (nothing to capture on this node).
	ErrNoInterface = errors.New("no watched interface matches the capture's interfaces")
)

// New returns a Capturer over the agent's datapath. It loads nothing: each
// Run loads, attaches and removes its own program instances.
func New(cfg Config) *Capturer {
	if cfg.RingBytes <= 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Capturer{cfg: cfg, log: cfg.Logger}
}

// Run captures the packets matching f on the watched interfaces until l
// is reached or ctx ends, calling emit for each, from one goroutine, in
// order per CPU. An emit error ends the capture; Run returns it with the
// Result so far. With no error, Result.Reason says which bound ended it.
// Several captures may run at once (up to MaxConcurrent).
func (c *Capturer) Run(ctx context.Context, f Filter, l Limits, emit func(Packet) error) (Result, error) {
	return c.run(ctx, f, l, emit)
}
