package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// WaitFor calls cond until it returns nil, first every millisecond, then
// backing off up to every 50 milliseconds. If cond has not returned nil once
// timeout has passed, WaitFor fails the test with t.Fatalf and the last error
// cond returned.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

const (
	firstPoll = time.Millisecond
	maxPoll   = 50 * time.Millisecond
)

// poll is WaitFor without the testing.TB: it returns the failure instead of
// reporting it. cond is called at least once, and once more at the deadline.
// An error wrapped by giveUp ends the polling at once.
func poll(timeout time.Duration, cond func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	interval := firstPoll
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if g := (giveUpError{}); errors.As(err, &g) {
			return g.err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("condition not met after %v: %w", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(min(interval, left))
		interval = min(2*interval, maxPoll)
	}
}

// giveUpError marks a condition that can no longer become true, such as a
// server that failed to start.
type giveUpError struct{ err error }

func (e giveUpError) Error() string { return e.err.Error() }
func (e giveUpError) Unwrap() error { return e.err }

func giveUp(err error) error { return giveUpError{err} }
