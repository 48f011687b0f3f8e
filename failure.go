package lash

import (
	"errors"
	"fmt"
	"time"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/turn"
)

// Codes of turns that could not succeed and were committed as failed
// (Termination.Code of a turn whose Reason is turn.Error).
const (
	// FailNondeterminism: the turn asked for an effect other than the one
	// its journal recorded (changed settings or code).
	FailNondeterminism = "nondeterminism"
	// FailUnreadableJournal: a journal record of the turn cannot be read
	// (undecodable, or its payload is lost).
	FailUnreadableJournal = "unreadable_journal"
	// FailInvalidResult: the machine refused an answer it was given.
	FailInvalidResult = "invalid_result"
	// FailSettingsChanged: the turn began under turn settings no live node
	// runs any more.
	FailSettingsChanged = "settings_changed"
	// FailAttempts: the turn failed on every one of its attempts.
	FailAttempts = "attempts_exhausted"
	// FailTooLarge: the turn's commit is over the payload ceiling.
	FailTooLarge = "turn_too_large"
)

// DefaultTurnAttempts is how many runs may begin a turn before it is
// committed as failed.
const DefaultTurnAttempts = 8

// WithTurnAttempts sets how many runs may begin one turn (each fences the
// session log) before the turn is committed as failed with the last cause;
// runs that fail are retried with a backoff doubling from a second up to a
// minute. Default DefaultTurnAttempts.
func WithTurnAttempts(n int) Option { return func(o *options) { o.turnAttempts = n } }

// failure is a turn that can never succeed: it is committed as failed.
type failure struct {
	code string
	err  error
}

func (f *failure) Error() string { return f.code + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// terminal marks err as a failure that retrying cannot mend.
func terminal(code string, err error) error { return &failure{code: code, err: err} }

// asFailure reports whether err can never succeed, and how to record it.
func asFailure(err error) (*failure, bool) {
	var f *failure
	switch {
	case errors.As(err, &f):
		return f, true
	case errors.Is(err, effectlog.ErrNondeterminism):
		return &failure{code: FailNondeterminism, err: err}, true
	case errors.Is(err, effectlog.ErrMalformed), errors.Is(err, blobs.ErrMissing), errors.Is(err, blobs.ErrCorrupt):
		return &failure{code: FailUnreadableJournal, err: err}, true
	case errors.Is(err, blobs.ErrTooLarge):
		return &failure{code: FailTooLarge, err: err}, true
	case errors.Is(err, turn.ErrInvalidResult), errors.Is(err, turn.ErrUnexpectedResult), errors.Is(err, turn.ErrUnknownEffect):
		return &failure{code: FailInvalidResult, err: err}, true
	}
	return nil, false
}

// failedOutcome is the outcome committed for a turn that failed: nothing of
// its work enters the history, and the calls the session held suspended
// stay suspended.
func failedOutcome(f *failure, suspended []turn.SuspendedCall) turn.Outcome {
	return turn.Outcome{Status: turn.StatusDone, Suspended: suspended,
		Termination: turn.Termination{Reason: turn.Error, Code: f.code, Detail: f.err.Error()}}
}

// AttemptError is a run that failed and will be tried again: Attempt is
// how many runs have begun its turn so far.
type AttemptError struct {
	Attempt int
	Err     error
}

func (e *AttemptError) Error() string {
	return fmt.Sprintf("attempt %d: %v", e.Attempt, e.Err)
}

func (e *AttemptError) Unwrap() error { return e.Err }

// retryDelay is how long a failed run waits before its next attempt: a
// second, doubling, at most a minute.
func retryDelay(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}
