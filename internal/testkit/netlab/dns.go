package netlab

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSQuery is a DNS query for name (type A, class IN), id given.
func DNSQuery(id uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for _, label := range strings.Split(name, ".") {
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	return append(b, 0, 0, 1, 0, 1)
}

// AskDNS sends one DNS query from src to dst and waits up to wait for an answer;
// it returns the answer's rcode, or -1 when none came.
func AskDNS(ns *Netns, src, dst string, q []byte, wait time.Duration) (rcode int, err error) {
	rcode = -1
	err = ns.Do(func() error {
		la, _ := net.ResolveUDPAddr("udp", src)
		ra, _ := net.ResolveUDPAddr("udp", dst)
		c, err := net.ListenUDP("udp", la)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.WriteToUDP(q, ra); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		c.SetReadDeadline(time.Now().Add(wait))
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			return nil // unanswered
		}
		if n >= 4 {
			rcode = int(buf[3] & 0xf)
		}
		return nil
	})
	return
}

// SlowDNS answers every query on addr after delay, with NOERROR and no
// records: a slow upstream server (a dnsmasq forwards to it).
func SlowDNS(t T, ns *Netns, addr string, delay time.Duration) {
	t.Helper()
	serveUDP(t, ns, addr, func(q []byte) []byte {
		ans := append([]byte(nil), q...)
		ans[2] |= 0x80 // QR
		ans[3] = 0x80  // RA, NOERROR
		time.Sleep(delay)
		return ans
	})
}

// serveUDP answers each datagram on UDP addr in ns with what answer
// returns for it (nil: none), until the test ends.
func serveUDP(t T, ns *Netns, addr string, answer func(q []byte) []byte) {
	t.Helper()
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		la, _ := net.ResolveUDPAddr("udp", addr)
		c, err = net.ListenUDP("udp", la)
		return
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if n >= 4 {
				if ans := answer(buf[:n]); ans != nil {
					c.WriteToUDP(ans, from)
				}
			}
		}
	}()
}

// DNSRecord is one A or AAAA record of a DNSAnswer: A for an IPv4
// address, AAAA for an IPv6 one.
type DNSRecord struct {
	Addr string
	TTL  uint32
}

// DNSAnswer is the response (NOERROR, RA) with id to a type A query for
// name, carrying the records.
func DNSAnswer(id uint16, name string, records ...DNSRecord) ([]byte, error) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, Response: true, RecursionAvailable: true})
	b.EnableCompression()
	n, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, err
	}
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, r := range records {
		a, err := netip.ParseAddr(r.Addr)
		if err != nil {
			return nil, err
		}
		h := dnsmessage.ResourceHeader{Name: n, Class: dnsmessage.ClassINET, TTL: r.TTL}
		if a.Is4() {
			err = b.AResource(h, dnsmessage.AResource{A: a.As4()})
		} else {
			err = b.AAAAResource(h, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// ServeDNS is a resolver on UDP addr in ns until the test ends: it answers
// a name of zone with its records (DNSAnswer), any other with NXDOMAIN.
func ServeDNS(t T, ns *Netns, addr string, zone map[string][]DNSRecord) {
	t.Helper()
	serveUDP(t, ns, addr, func(query []byte) []byte {
		var p dnsmessage.Parser
		h, err := p.Start(query)
		if err != nil {
			return nil
		}
		q, err := p.Question()
		if err != nil {
			return nil
		}
		name := strings.TrimSuffix(q.Name.String(), ".")
		records, ok := zone[name]
		msg, err := DNSAnswer(h.ID, name, records...)
		if err != nil {
			return nil
		}
		if !ok {
			msg[3] |= 3 // NXDOMAIN
		}
		return msg
	})
}
