package lash

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// kept returns the state node n keeps for session id, and puts it back.
func kept(t *testing.T, n *Node, id string) *state {
	t.Helper()
	st := n.states.take(id)
	if st == nil {
		t.Fatalf("node keeps no state for session %s", id)
	}
	n.states.put(st)
	return st
}

// sameAsFold fails unless the state n kept for s equals a fresh fold of the
// whole log.
func sameAsFold(t *testing.T, n *Node, s *Session) {
	t.Helper()
	fresh, err := s.load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := kept(t, n, s.id); !reflect.DeepEqual(got, fresh) {
		t.Fatalf("kept state of %s differs from a fresh fold of its log:\nkept  %+v\nfresh %+v", s.id, got, fresh)
	}
}

// Two nodes take turns on one session, one of them crashing mid-turn: the
// state each keeps is brought up to date by what the other wrote, and stays
// equal to a fresh fold of the log.
func TestKeptStateFollowsOtherWriters(t *testing.T) {
	r := newRig(t)
	a, b := r.node("a"), r.node("b")
	send := func(n *Node, key string) {
		t.Helper()
		if _, _, err := n.Session("s1").Send(r.ctx, key, Input{Text: "Weather?"}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(n *Node, want int) {
		t.Helper()
		res := runUntilFree(t, n.Session("s1"))
		if len(res) != want {
			t.Fatalf("%s committed %d turns, want %d", n.opts.nodeID, len(res), want)
		}
		sameAsFold(t, n, n.Session("s1"))
	}
	send(a, "k1")
	run(a, 1)
	send(a, "k2")
	send(a, "k3")
	run(b, 1) // k3 joins k2's turn at its checkpoint
	// A node that dies after its fence and a recorded model call: the
	// next run's kept state has the fence and counts the attempt.
	conn := r.conn()
	c := r.nodeOn(conn, "c", withBoundary(func(name string) error {
		if name == "after-record llm-call" {
			conn.Close()
			return errCrash
		}
		return nil
	}))
	send(a, "k4")
	if _, err := c.Session("s1").Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run on c: %v, want the crash", err)
	}
	run(a, 1)
	st := kept(t, a, "s1")
	if len(st.turns) != 3 || st.attempts != 0 {
		t.Fatalf("kept state: %d turns, %d attempts; want 3 and 0", len(st.turns), st.attempts)
	}
	tr, err := b.Session("s1").Transcript(r.ctx)
	if err != nil || !reflect.DeepEqual(tr, st.history) {
		t.Fatalf("transcript on b (%d messages, %v) differs from a's kept history (%d)", len(tr), err, len(st.history))
	}
}

// A turn reads as many messages and bytes from NATS on a session with a
// long history as on a young one: the node reads only what the log gained
// since its last run, never the history.
func TestReadsPerTurnBounded(t *testing.T) {
	r := newRig(t)
	nc := r.conn()
	n := r.nodeOn(nc, "a")
	s := n.Session("s1")
	turnReads := func(i int) (msgs, bytes uint64) {
		t.Helper()
		if _, _, err := s.Send(r.ctx, fmt.Sprint(i), Input{Text: "Weather?"}); err != nil {
			t.Fatal(err)
		}
		before := nc.Stats()
		if res, err := s.Run(r.ctx); err != nil || len(res) != 1 {
			t.Fatalf("turn %d: %v, %v", i, res, err)
		}
		after := nc.Stats()
		return after.InMsgs - before.InMsgs, after.InBytes - before.InBytes
	}
	// The model's request shows at most its last 32 messages in the
	// journal: past them a turn's writes and reads stop growing.
	const young, old = 40, 160
	var youngMsgs, youngBytes uint64
	for i := 1; i <= old; i++ {
		msgs, bytes := turnReads(i)
		switch i {
		case young:
			youngMsgs, youngBytes = msgs, bytes
		case old:
			if msgs != youngMsgs || bytes > youngBytes+youngBytes/50 {
				t.Fatalf("turn %d read %d messages, %d bytes; turn %d read %d messages, %d bytes: "+
					"a turn's reads must not grow with the session's history", old, msgs, bytes, young, youngMsgs, youngBytes)
			}
		}
	}
}

// A run that goes on from its own commit to the next input records that
// turn's effects under its first fence. When it dies there, the next run
// must not take the turn for a fresh one: it replays the recorded model
// call instead of calling the model again.
func TestRunThatWentOnIsReplayed(t *testing.T) {
	r := newRig(t)
	conn := r.conn()
	second := false
	var a *Node
	a = r.nodeOn(conn, "a", withBoundary(func(name string) error {
		switch {
		case name == "before-commit" && !second:
			// After the turn's last checkpoint: the input starts a turn of
			// its own, in the same run.
			second = true
			if _, _, err := a.Session("s1").Send(r.ctx, "k2", Input{Text: "And tomorrow?"}); err != nil {
				t.Error(err)
			}
		case name == "after-record llm-call" && second:
			conn.Close()
			return errCrash
		}
		return nil
	}))
	if _, _, err := a.Session("s1").Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Session("s1").Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run on a: %v, want the crash in the second turn", err)
	}
	calls := r.models.Requests()
	b := r.node("b")
	res := runUntilFree(t, b.Session("s1"))
	if len(res) != 1 || res[0].Replayed == 0 {
		t.Fatalf("b committed %+v; want the second turn, with the model call a recorded replayed", res)
	}
	// The turn's one model call was recorded: b makes none.
	if got := r.models.Requests() - calls; got != 0 {
		t.Fatalf("b made %d model requests for a turn whose model call a recorded", got)
	}
}
