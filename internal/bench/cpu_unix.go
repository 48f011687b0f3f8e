//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime is the CPU this process has used, user and system: the node,
// the bench's clients and, when it is embedded, the server.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
