package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// scraper reads a target's two traffic metrics, by pair.
type scraper struct {
	url                    string
	bytesName, packetsName string
	labels                 []string // source ns, workload, destination ns, workload
	n                      int      // scrapes so far
}

type scraped struct {
	t      totals
	series int
}

func (s *scraper) scrape() (scraped, error) {
	s.n++
	resp, err := http.Get(s.url)
	if err != nil {
		return scraped{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return scraped{}, err
	}
	out := scraped{t: totals{}}
	for _, l := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(l, "{")
		if !ok || (name != s.bytesName && name != s.packetsName) {
			continue
		}
		lbls, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err != nil {
			return out, fmt.Errorf("%q: %w", l, err)
		}
		m := parseLabels(lbls)
		k := pair{m[s.labels[0]], m[s.labels[1]], m[s.labels[2]], m[s.labels[3]]}
		c := out.t[k]
		if name == s.bytesName {
			c.bytes += v
			out.series++
		} else {
			c.packets += v
		}
		out.t[k] = c
	}
	return out, nil
}

func parseLabels(s string) map[string]string {
	m := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		v, rest2, _ := strings.Cut(rest, `"`)
		m[k] = v
		s = strings.TrimPrefix(rest2, ",")
	}
	return m
}

func sum(t totals) (b, p float64) {
	for _, c := range t {
		b += c.bytes
		p += c.packets
	}
	return
}

// waitFor polls until the metrics hold want's bytes and packets (and, if
// enriched, no byte under an empty namespace: the informers synced).
func (s *scraper) waitFor(want totals, timeout time.Duration, enriched bool) error {
	wb, wp := sum(want)
	deadline := time.Now().Add(timeout)
	var gb, gp float64
	for {
		got, err := s.scrape()
		if err == nil {
			gb, gp = sum(got.t)
			if gb >= wb && gp >= wp {
				if !enriched {
					return nil
				}
				if _, wrong := compare(want, got); wrong == 0 {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("metrics hold %.0f of %.0f bytes, %.0f of %.0f packets after %v (last error %v)", gb, wb, gp, wp, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// compare counts the pairs whose bytes and packets equal what was sent,
// and those that differ (or were not sent).
func compare(want totals, got scraped) (exact, wrong int) {
	for k, w := range want {
		g := got.t[k]
		if math.Abs(g.bytes-w.bytes) < 0.5 && math.Abs(g.packets-w.packets) < 0.5 {
			exact++
		} else {
			wrong++
		}
	}
	for k := range got.t {
		if _, ok := want[k]; !ok {
			wrong++
		}
	}
	return exact, wrong
}
