// Package netlab builds throw-away network topologies in the real kernel for
// tests and benchmarks alike: named network namespaces, veth pairs, bridges,
// addresses, routes, static neighbours, and small UDP and DNS
// senders/listeners that run inside a namespace. It is the one lab builder:
// the kernel tests, test/dashboards and the benchmarks (hack/bench/live,
// hack/bench/enrich) build their labs with it. NewNodeLab builds the
// node-balance lab (a node with pods, a Service, VXLAN to a second node, a
// tun device) and turns the kernel's counters into the wire packets and
// bytes each of its interfaces carried (NodeLab.Wire).
//
// The helpers take a T: a test's testing.TB, or a Script in a program.
// Everything a helper creates is registered with t.Cleanup, so it is torn
// down when the test ends (or the Script closes), also when it fails or
// panics. Namespace names carry
// the prefix "fltest-", the creating process id and a random suffix, so
// parallel test processes never collide, and a later test process can sweep
// the leftovers of one that was killed before its cleanups ran.
//
// The helpers need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); tests call
// [Require] first, which asks internal/testkit's gate: the test skips in
// short mode and, outside CI, where root is missing; in CI it fails.
//
// Functions that take a *Netns accept nil for the test process's own
// namespace, except the sysctl helpers, which refuse to touch the host.
package netlab
