// Package netlab builds throw-away network topologies in the real kernel for
// tests: named network namespaces, veth pairs, bridges, addresses, and small
// UDP senders/listeners that run inside a namespace.
//
// Everything a helper creates is registered with t.Cleanup, so it is torn
// down when the test ends, also when it fails or panics. Namespace names carry
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
