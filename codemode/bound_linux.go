package codemode

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// bound sets the child's own limits: memory the runtime maps (RLIMIT_DATA
// counts it on Linux) and CPU time. RLIMIT_CPU counts the process's whole
// life and a child runs programs one after another: each program's soft
// limit is what the process spent before it plus the bound (boundCPU),
// under a hard limit of cpuLives bounds, past which a child takes no more
// programs (fresh). Go ignores SIGXCPU, which comes at the soft limit:
// the child ends itself on it, saying why, and the hard limit kills it
// should it not.
func bound(memory int64, cpu time.Duration) error {
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: uint64(memory), Max: uint64(memory)}); err != nil {
		return err
	}
	secs := uint64(cpu / time.Second)
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: secs, Max: secs*cpuLives + 1}); err != nil {
		return err
	}
	xcpu := make(chan os.Signal, 1)
	signal.Notify(xcpu, syscall.SIGXCPU)
	go func() {
		<-xcpu
		fmt.Fprintln(os.Stderr, cpuExceeded)
		os.Exit(3)
	}()
	return nil
}

// boundCPU sets the soft CPU limit for the program about to run.
func boundCPU(cpu time.Duration) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CPU, &l); err != nil {
		return err
	}
	soft := uint64((cpuSpent() + cpu + time.Second - 1) / time.Second)
	if soft >= l.Max {
		return fmt.Errorf("%d s of CPU time left, less than a program's bound", l.Max-1-uint64(cpuSpent()/time.Second))
	}
	return syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: soft, Max: l.Max})
}

// cpuSpent is the CPU time the process has used, as RLIMIT_CPU counts it.
func cpuSpent() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return time.Duration(1<<63 - 1) // unknown: take no other program
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
