package codemode

import (
	"syscall"
	"time"
)

// bound sets the child's own limits: memory the runtime maps (RLIMIT_DATA
// counts it on Linux) and CPU time (SIGXCPU at the limit, SIGKILL a
// second later).
func bound(memory int64, cpu time.Duration) error {
	secs := uint64(cpu / time.Second)
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: uint64(memory), Max: uint64(memory)}); err != nil {
		return err
	}
	return syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: secs, Max: secs + 1})
}
