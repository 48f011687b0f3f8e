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

// cpuSpent is the CPU time the process has used, as RLIMIT_CPU counts it.
func cpuSpent() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return time.Duration(1<<63 - 1) // unknown: take no other program
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
