// Package chaos is flowlens under floods and faults (`make chaos`, build tag
// chaos, run by .ci/run): each case runs real traffic with known counts
// through the real binaries, breaks something (a new-flow flood, a collector
// killed again and again, a broker or an API server gone, an agent killed
// mid-eviction, a dead exporter at shutdown) and checks two things: what was
// delivered plus what was counted as lost equals what the kernel says was
// sent, and the component recovers by itself. One file per case; what the
// cases share is in chaos_test.go. Most cases need root and a kernel.
package chaos
