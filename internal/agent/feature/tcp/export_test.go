package tcp

import "time"

// SetSweep sets how long a pending connect's SYNs must have stopped before
// Sweep reports it, and how often Sweep reads, for a test (the agent runs
// in the test's process); the returned function restores them.
func SetSweep(after, every time.Duration) func() {
	a, e := giveUp, sweepEvery
	giveUp, sweepEvery = after, every
	return func() { giveUp, sweepEvery = a, e }
}
