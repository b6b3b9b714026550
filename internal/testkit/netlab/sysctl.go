package netlab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Sysctl writes value to key ("net.ipv6.conf.all.accept_dad") inside ns.
// /proc/sys/net resolves against the namespace of the calling thread, so
// writing it from within Do changes only that namespace. Keys whose
// components contain dots (a "eth0.100" vlan) may be given with slashes.
func Sysctl(ns *Netns, key, value string) error {
	if ns == nil {
		return fmt.Errorf("netlab: refusing to change host sysctl %s", key)
	}
	path := key
	if !strings.Contains(key, "/") {
		path = strings.ReplaceAll(key, ".", "/")
	}
	path = filepath.Join("/proc/sys", path)
	return ns.Do(func() error {
		return os.WriteFile(path, []byte(value), 0o644)
	})
}

// Quiet disables IPv6 in ns (all, default and every existing interface), so
// links there send no DAD, router solicitation or MLD packet and a test can
// count packets exactly. Call it before creating the namespace's links.
func Quiet(t T, ns *Netns) {
	t.Helper()
	mustSysctls(t, ns, map[string]string{"disable_ipv6": "1"})
}

// QuietIPv6 keeps IPv6 in ns but silences what the kernel sends by itself on
// link up: DAD probes (accept_dad, dad_transmits), router solicitations and
// acceptance of router advertisements, and it stretches the MLD unsolicited
// report retransmit intervals to an hour.
//
// No sysctl suppresses the first unsolicited MLD report for the
// solicited-node group of each new address (link-local ones included), so a
// test that counts packets exactly should snapshot counters after the links
// are up and the addresses are added, or pin addr_gen_mode=1 itself to get
// no link-local address at all.
func QuietIPv6(t T, ns *Netns) {
	t.Helper()
	mustSysctls(t, ns, map[string]string{
		"disable_ipv6":                      "0",
		"accept_dad":                        "0",
		"dad_transmits":                     "0",
		"accept_ra":                         "0",
		"router_solicitations":              "0",
		"mldv1_unsolicited_report_interval": "3600000",
		"mldv2_unsolicited_report_interval": "3600000",
	})
}

// mustSysctls sets net.ipv6.conf.<x>.<key> for x in all, default and each
// existing interface: for most keys "all" is not propagated to existing
// interfaces, and for accept_dad the kernel checks both all and the device.
func mustSysctls(t T, ns *Netns, kv map[string]string) {
	t.Helper()
	if ns == nil {
		t.Fatal("netlab: refusing to change host IPv6 sysctls")
	}
	err := ns.Do(func() error {
		dirs, err := os.ReadDir("/proc/sys/net/ipv6/conf")
		if err != nil {
			return err
		}
		// all and default first, so interfaces created meanwhile inherit.
		order := []string{"all", "default"}
		for _, d := range dirs {
			if d.Name() != "all" && d.Name() != "default" {
				order = append(order, d.Name())
			}
		}
		for _, dev := range order {
			for k, v := range kv {
				p := filepath.Join("/proc/sys/net/ipv6/conf", dev, k)
				if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("netlab: ipv6 sysctls in %s: %v", ns, err)
	}
}
