//go:build unix

package leases

import (
	"errors"
	"syscall"
)

// processGone reports whether no process with pid exists on this machine.
func processGone(pid int) bool {
	if pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
