//go:build !linux

package codemode

import "time"

// bound: outside Linux the child keeps the runtime's soft memory limit
// only, and the sandbox's quiet bound.
func bound(int64, time.Duration) error { return nil }

// boundCPU: no CPU bound outside Linux.
func boundCPU(time.Duration) error { return nil }

// cpuSpent: no CPU bound to spend outside Linux.
func cpuSpent() time.Duration { return 0 }
