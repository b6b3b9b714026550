// Package flowkafka is flowlens' flow API over Kafka, shared by both ends:
// the agent's exporter (internal/agent/exporter/kafka) and the collector's
// consumer group (pkg/receiver.Consumer).
//
// A record's value is protobuf: a flowlens.flow.v1.FlowBatch, or one
// flowlens.flow.v1.Flow, and its ContentType header says which (a decoder
// cannot tell them apart from the bytes: both start with a field 1 that is
// a message). Which partition a flow goes to is PartitionOf its 7-tuple:
// the same flow always lands in the same partition, and one node's flows
// spread over all of them (docs/export.md, Kafka).
//
// ClientOpts turns the connection settings both ends share (brokers, TLS,
// SASL) into franz-go options.
package flowkafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/flowlens/flowlens/pkg/tlsclient"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/flowlens/flowlens/pkg/flow"
)

// HeaderContentType is the record header naming the value's message type.
const HeaderContentType = "content-type"

// The ContentType header's values.
const (
	ContentTypeBatch = "application/x-protobuf; messageType=flowlens.flow.v1.FlowBatch"
	ContentTypeFlow  = "application/x-protobuf; messageType=flowlens.flow.v1.Flow"
)

// SASL mechanisms (the --kafka-sasl-mechanism values).
const (
	SASLNone        = "none"
	SASLPlain       = "plain"
	SASLScramSHA512 = "scram-sha-512"
)

// Conn is how a client reaches the brokers.
type Conn struct {
	Brokers []string
	// TLS is on when set or when any of the files is given. TLSCA
	// verifies the brokers (empty: the system's roots); TLSCert and TLSKey
	// are a client certificate (mTLS).
	TLS                    bool
	TLSCA, TLSCert, TLSKey string
	// SASL is SASLNone (or ""), SASLPlain or SASLScramSHA512, with
	// SASLUser and the password read from SASLPasswordFile (a file, so no
	// secret is on a command line).
	SASL, SASLUser, SASLPasswordFile string
}

// UsesTLS reports whether the connection is TLS.
func (c *Conn) UsesTLS() bool { return c.TLS || c.TLSCA != "" || c.TLSCert != "" || c.TLSKey != "" }

// ClientOpts returns the franz-go options for c. It reads the TLS and
// password files now, so a bad file fails at start-up. dialed, if not nil,
// is told every new broker connection (the agent learns its own address
// from one).
func (c *Conn) ClientOpts(dialed func(net.Conn)) ([]kgo.Opt, error) {
	if len(c.Brokers) == 0 {
		return nil, errors.New("no brokers")
	}
	var tc *tls.Config
	if c.UsesTLS() {
		var err error
		if tc, err = tlsclient.Config(c.TLSCA, c.TLSCert, c.TLSKey, ""); err != nil {
			return nil, err
		}
	}
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		if dialed != nil {
			dialed(conn)
		}
		if tc == nil {
			return conn, nil
		}
		cfg := tc.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(host)
		}
		return tls.Client(conn, cfg), nil
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.Dialer(dial)}
	switch c.SASL {
	case "", SASLNone:
	case SASLPlain, SASLScramSHA512:
		if c.SASLUser == "" || c.SASLPasswordFile == "" {
			return nil, fmt.Errorf("SASL %s needs a username and a password file", c.SASL)
		}
		b, err := os.ReadFile(c.SASLPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("read the SASL password: %w", err)
		}
		// A trailing newline is the file's, not the password's.
		pass := strings.TrimRight(string(b), "\r\n")
		if c.SASL == SASLPlain {
			opts = append(opts, kgo.SASL(plain.Auth{User: c.SASLUser, Pass: pass}.AsMechanism()))
		} else {
			opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUser, Pass: pass}.AsSha512Mechanism()))
		}
	default:
		return nil, fmt.Errorf("unknown SASL mechanism %q: must be none, plain or scram-sha-512", c.SASL)
	}
	return opts, nil
}

// Hash is a stable 64-bit hash (FNV-1a) of r's 7-tuple: the same on every
// agent and release, so that every record of one flow, from any node, goes
// to one partition. The bytes hashed are both addresses' 16-byte forms
// (As16), the ports (big-endian), the protocol, ICMP type and code.
func Hash(r *flow.Record) uint64 {
	h := addAddr(fnvOffset, r.SrcAddr)
	h = addAddr(h, r.DstAddr)
	h = fnvAdd(h, byte(r.SrcPort>>8))
	h = fnvAdd(h, byte(r.SrcPort))
	h = fnvAdd(h, byte(r.DstPort>>8))
	h = fnvAdd(h, byte(r.DstPort))
	h = fnvAdd(h, r.Proto)
	h = fnvAdd(h, r.IcmpType)
	return fnvAdd(h, r.IcmpCode)
}

// FNV-1a 64's parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvPrime10 is fnvPrime to the 10th, modulo 2^64: FNV-1a's step over a
// zero byte is a multiplication by the prime (h ^ 0 = h), so its ten
// steps over an IPv4 address's leading zeros are one multiplication.
var fnvPrime10 = func() uint64 {
	p := uint64(1)
	for range 10 {
		p *= fnvPrime
	}
	return p
}()

func fnvAdd(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

// addAddr hashes a's 16-byte form. An IPv4 address's (::ffff:a.b.c.d, most
// flows) takes 7 steps instead of 16, the same hash: that is half the
// tuple's, and FNV's steps are serial (each waits for the previous one's
// multiplication).
func addAddr(h uint64, a netip.Addr) uint64 {
	if a.Is4() {
		b := a.As4()
		h *= fnvPrime10
		h = fnvAdd(fnvAdd(h, 0xff), 0xff)
		return fnvAdd(fnvAdd(fnvAdd(fnvAdd(h, b[0]), b[1]), b[2]), b[3])
	}
	for _, b := range a.As16() {
		h = fnvAdd(h, b)
	}
	return h
}

// PartitionOf is the partition of r's records in a topic of n partitions.
func PartitionOf(r *flow.Record, n int) int32 { return int32(Hash(r) % uint64(n)) }
