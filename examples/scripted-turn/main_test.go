package main

import (
	"errors"
	"testing"

	"github.com/lash-run/lash/turn"
)

// The worker that replays the journal must not call the model or run a tool
// again for anything the crashed worker recorded.
func TestReplayFinishesWithoutRepeatingWork(t *testing.T) {
	cfg := turn.Config{Model: "scripted"}
	start := turn.Start{Session: "s", Turn: "t", Input: turn.Input{
		Messages: []turn.Message{{Role: turn.RoleUser, Text: "weather?"}}}}
	for crashAfter := 0; crashAfter < 8; crashAfter++ {
		j := journal{}
		var first, second counters
		if _, err := drive(cfg, start, j, &first, crashAfter); !errors.Is(err, errCrash) {
			t.Fatalf("crash after %d: first worker returned %v", crashAfter, err)
		}
		out, err := drive(cfg, start, j, &second, -1)
		if err != nil {
			t.Fatalf("crash after %d: %v", crashAfter, err)
		}
		if out.Termination.Reason != turn.NaturalEnd || len(out.Messages) != 6 {
			t.Fatalf("crash after %d: outcome %s with %d messages", crashAfter, out.Termination, len(out.Messages))
		}
		if got := first.model + second.model; got != 2 {
			t.Errorf("crash after %d: model called %d times in all, want 2", crashAfter, got)
		}
		if got := first.tools + second.tools; got != 3 {
			t.Errorf("crash after %d: tools ran %d times in all, want 3", crashAfter, got)
		}
	}
}
