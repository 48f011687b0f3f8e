package turn

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateRefusesNegativeMaxBackoff(t *testing.T) {
	cfg := Config{Limits: Limits{MaxBackoff: -time.Second}}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "MaxBackoff") {
		t.Fatalf("Validate() = %v, want a MaxBackoff error", err)
	}
	start := Start{Session: "s", Turn: "t"}
	if _, err := New(cfg, start); !errors.Is(err, ErrInvalidStart) {
		t.Fatalf("New: %v, want ErrInvalidStart", err)
	}
	if _, err := Restore(cfg, nil); !errors.Is(err, ErrInvalidStart) {
		t.Fatalf("Restore: %v, want ErrInvalidStart", err)
	}
	if got := (Config{}).withDefaults().Limits.MaxBackoff; got != DefaultMaxBackoff {
		t.Fatalf("default MaxBackoff %v, want %v", got, DefaultMaxBackoff)
	}
}

// A backoff function that asks for a negative sleep is clamped to zero
// rather than yielding a Sleep the state invariants refuse.
func TestNegativeBackoffSleepsZero(t *testing.T) {
	cfg := Config{Limits: Limits{Backoff: func(int) time.Duration { return -time.Minute }}}
	m := startTurn(t, cfg, nil)
	mustDeliver(t, m, LLMResult{ID: outstanding(t, m).Head().ID, Err: &CallError{Retryable: true, Code: "429"}})
	e := outstanding(t, m)
	if s, ok := e.(*Sleep); !ok || s.Duration != 0 {
		t.Fatalf("outstanding %s, want a zero Sleep", describeEffect(e))
	}
}

// A history the machine hashes itself is checked message by message; one
// that comes with its digest is the driver's kept history of earlier
// turns, taken as it is, so a turn's start does not grow with the session.
func TestHistoryCheckedUnlessDigested(t *testing.T) {
	history := []Message{{Role: RoleUser, Text: "hi"}, {Role: 0, Text: "no role"}}
	start := Start{Session: "s", Turn: "t", History: history}
	if _, err := New(Config{}, start); !errors.Is(err, ErrInvalidStart) || !strings.Contains(err.Error(), "history message 1") {
		t.Fatalf("New without a digest: %v, want ErrInvalidStart naming message 1", err)
	}
	d := Digest{}.Extend(history...)
	start.HistoryDigest = &d
	if _, err := New(Config{}, start); err != nil {
		t.Fatalf("New with the history's digest: %v", err)
	}
}
