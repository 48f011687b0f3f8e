package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
)

func hashOf(s string) turn.Hash { return turn.Hash(sha256.Sum256([]byte("request: " + s))) }

func load(t *testing.T, ctx context.Context, j *effectlog.Journal, session, turnID string) []*effectlog.Record {
	t.Helper()
	var recs []*effectlog.Record
	read(t, "Load("+session+", "+turnID+")", func() (err error) { recs, err = j.Load(ctx, session, turnID); return err })
	return recs
}

func sameOutcome(a, b effectlog.Outcome) bool {
	return bytes.Equal(a.Data, b.Data) && a.Failed == b.Failed && a.Error == b.Error
}

type recordResult struct {
	rec *effectlog.Record
	won bool
	err error
}

// testFirstWriterWins: of 8 recorders racing with different outcomes for
// one key, one wins and all 8 get its record back.
func testFirstWriterWins(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	key := turn.ReplayKey{Session: "fww", Turn: "turn 1", Iteration: 2, Kind: turn.KindLLMCall, Effect: 3}
	h := hashOf("llm")
	js := make([]*effectlog.Journal, racers)
	for i := range js {
		js[i] = effectlog.New(d.client, effectlog.WithRecorder(fmt.Sprintf("recorder-%d", i)))
	}
	res := race(racers, func(i int) recordResult {
		rec, won, err := js[i].Record(ctx, key, h, effectlog.Outcome{Data: fmt.Appendf(nil, "outcome of %d", i)})
		return recordResult{rec, won, err}
	})
	winner := -1
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("recorder %d: %v", i, r.err)
		}
		if r.won {
			if winner >= 0 {
				t.Fatalf("recorders %d and %d both won", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no recorder won")
	}
	w := res[winner].rec
	wantOut := effectlog.Outcome{Data: fmt.Appendf(nil, "outcome of %d", winner)}
	if w.Recorder != fmt.Sprintf("recorder-%d", winner) || !sameOutcome(w.Outcome, wantOut) || w.Key != key || w.Hash != h || w.Seq == 0 {
		t.Fatalf("winner's record %+v; want recorder-%d with %+v", w, winner, wantOut)
	}
	for i, r := range res {
		if r.rec.Seq != w.Seq || r.rec.Recorder != w.Recorder || !sameOutcome(r.rec.Outcome, w.Outcome) || r.rec.Key != key || r.rec.Hash != h {
			t.Errorf("recorder %d got record %+v; want the winner's %+v", i, r.rec, w)
		}
	}
	recs := load(t, ctx, js[0], key.Session, key.Turn)
	if len(recs) != 1 || recs[0].Seq != w.Seq || !sameOutcome(recs[0].Outcome, w.Outcome) || recs[0].Key != key {
		t.Fatalf("Load = %+v; want exactly the winner's record %+v", recs, w)
	}
	// Later recorders, of any name, keep getting the winner's record.
	rec, won, err := effectlog.New(d.reopen(t), effectlog.WithRecorder("late")).Record(ctx, key, h, effectlog.Outcome{Data: []byte("late")})
	if err != nil || won || rec.Seq != w.Seq || !sameOutcome(rec.Outcome, w.Outcome) {
		t.Fatalf("late recorder: %+v won=%v %v; want the winner's record", rec, won, err)
	}
	if recs := load(t, ctx, js[0], key.Session, key.Turn); len(recs) != 1 {
		t.Fatalf("Load after a late recorder: %d records; want 1", len(recs))
	}
}

// testNondeterminism: a request with another hash than the recorded one is
// a *NondeterminismError, from Record and from Lookup, from any recorder.
func testNondeterminism(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	key := turn.ReplayKey{Session: "nd", Turn: "t", Iteration: 1, Kind: turn.KindToolCall, Effect: 2, Call: "call.1/x"}
	recorded, current := hashOf("asked then"), hashOf("asked now")
	j := effectlog.New(d.client, effectlog.WithRecorder("r1"))
	out := effectlog.Outcome{Data: []byte("result")}
	if _, won, err := j.Record(ctx, key, recorded, out); err != nil || !won {
		t.Fatalf("Record: won=%v %v", won, err)
	}
	check := func(what string, err error) {
		t.Helper()
		var nd *effectlog.NondeterminismError
		if !errors.As(err, &nd) || !errors.Is(err, effectlog.ErrNondeterminism) {
			t.Fatalf("%s: got %v, want *NondeterminismError", what, err)
		}
		if nd.Key != key || nd.Recorded != recorded || nd.Current != current {
			t.Fatalf("%s: error carries key %v recorded %s current %s; want %v, %s, %s",
				what, nd.Key, nd.Recorded.Short(), nd.Current.Short(), key, recorded.Short(), current.Short())
		}
		if !strings.Contains(err.Error(), "lash:nondeterminism") {
			t.Fatalf("%s: error text %q lacks the code lash:nondeterminism", what, err)
		}
	}
	_, _, err := j.Record(ctx, key, current, effectlog.Outcome{Data: []byte("other")})
	check("Record by the same recorder", err)
	other := effectlog.New(d.reopen(t), effectlog.WithRecorder("r2"))
	_, _, err = other.Record(ctx, key, current, effectlog.Outcome{Data: []byte("other")})
	check("Record by another recorder", err)
	_, err = other.Lookup(ctx, key, current)
	check("Lookup", err)
	// The recorded request still replays, and nothing was added.
	rec, err := other.Lookup(ctx, key, recorded)
	if err != nil || !sameOutcome(rec.Outcome, out) || rec.Recorder != "r1" {
		t.Fatalf("Lookup with the recorded hash: %+v %v", rec, err)
	}
	if recs := load(t, ctx, other, key.Session, key.Turn); len(recs) != 1 {
		t.Fatalf("Load: %d records; want 1", len(recs))
	}
	// A key never recorded is not recorded, whatever the hash.
	unknown := key
	unknown.Effect = 3
	if _, err := other.Lookup(ctx, unknown, current); !errors.Is(err, effectlog.ErrNotRecorded) {
		t.Fatalf("Lookup of an unrecorded key: got %v, want ErrNotRecorded", err)
	}
}

// testFailureReplays: a recorded failure comes back as the same failure,
// and first-writer-wins holds for failures too.
func testFailureReplays(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	j := effectlog.New(d.client, effectlog.WithRecorder("r"))
	cases := []struct {
		key turn.ReplayKey
		out effectlog.Outcome
	}{
		{turn.ReplayKey{Session: "fail", Turn: "t", Kind: turn.KindToolCall, Effect: 1, Call: "c1"},
			effectlog.Outcome{Failed: true, Error: "tool exploded: exit status 3"}},
		{turn.ReplayKey{Session: "fail", Turn: "t", Kind: turn.KindLLMCall, Effect: 2},
			effectlog.Outcome{Failed: true, Error: "provider: 429 rate limited", Data: []byte(`{"retry_after":3}`)}},
	}
	for _, c := range cases {
		h := hashOf(c.key.String())
		rec, won, err := j.Record(ctx, c.key, h, c.out)
		if err != nil || !won || !sameOutcome(rec.Outcome, c.out) {
			t.Fatalf("Record(%v, %+v): %+v won=%v %v", c.key, c.out, rec, won, err)
		}
		// Another worker, retrying the effect successfully, gets the failure.
		rec, won, err = effectlog.New(d.reopen(t), effectlog.WithRecorder("r2")).Record(ctx, c.key, h, effectlog.Outcome{Data: []byte("ok")})
		if err != nil || won || !sameOutcome(rec.Outcome, c.out) {
			t.Fatalf("a success after a recorded failure: %+v won=%v %v; want the failure", rec, won, err)
		}
		rec, err = effectlog.New(d.reopen(t)).Lookup(ctx, c.key, h)
		if err != nil || !sameOutcome(rec.Outcome, c.out) || rec.Key != c.key || rec.Hash != h {
			t.Fatalf("Lookup(%v) = %+v, %v; want outcome %+v", c.key, rec, err, c.out)
		}
	}
	recs := load(t, ctx, j, "fail", "t")
	if len(recs) != len(cases) {
		t.Fatalf("Load: %d records; want %d", len(recs), len(cases))
	}
	for i, r := range recs {
		if r.Key != cases[i].key || !sameOutcome(r.Outcome, cases[i].out) {
			t.Fatalf("Load[%d] = %+v; want key %v outcome %+v", i, r, cases[i].key, cases[i].out)
		}
	}
}

// testInDoubt: a call is in doubt when an attempt of it was noted (its own
// intent, or the outcome right before its batch marked Intends) and no
// outcome is recorded for it; never otherwise.
func testInDoubt(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	j := effectlog.New(d.client, effectlog.WithRecorder("r"))
	other := effectlog.New(d.reopen(t), effectlog.WithRecorder("r2"))
	call := func(turnID string, effect turn.EffectID, id string) turn.ReplayKey {
		return turn.ReplayKey{Session: "doubt", Turn: turnID, Kind: turn.KindToolCall, Effect: effect, Call: id}
	}
	answer := func(turnID string, effect turn.EffectID) turn.ReplayKey {
		return turn.ReplayKey{Session: "doubt", Turn: turnID, Kind: turn.KindLLMCall, Effect: effect}
	}
	inDoubt := func(k turn.ReplayKey, want bool) {
		t.Helper()
		var got bool
		read(t, "InDoubt("+k.String()+")", func() (err error) { got, err = other.InDoubt(ctx, k); return err })
		if got != want {
			t.Fatalf("InDoubt(%v) = %v; want %v", k, got, want)
		}
	}
	record := func(k turn.ReplayKey, out effectlog.Outcome) {
		t.Helper()
		if _, won, err := j.Record(ctx, k, hashOf(k.String()), out); err != nil || !won {
			t.Fatalf("Record(%v): won=%v %v", k, won, err)
		}
	}
	// Nothing noted: not in doubt.
	inDoubt(call("t1", 3, "c1"), false)
	// Its own intent, then its outcome.
	if err := j.Started(ctx, call("t1", 3, "c1"), 1); err != nil {
		t.Fatal(err)
	}
	inDoubt(call("t1", 3, "c1"), true)
	record(call("t1", 3, "c1"), effectlog.Outcome{Data: []byte("done")})
	inDoubt(call("t1", 3, "c1"), false)
	// An answer marked Intends stands for the calls of the batch after it,
	// and only those.
	record(answer("t2", 2), effectlog.Outcome{Data: []byte("call c1 and c2"), Intends: true})
	inDoubt(call("t2", 3, "c1"), true)
	inDoubt(call("t2", 3, "c2"), true)
	inDoubt(call("t2", 4, "c1"), false)
	inDoubt(call("t3", 3, "c1"), false)
	record(call("t2", 3, "c2"), effectlog.Outcome{Data: []byte("done")})
	inDoubt(call("t2", 3, "c2"), false)
	// An answer not so marked stands for nothing.
	record(answer("t4", 2), effectlog.Outcome{Data: []byte("call c1")})
	inDoubt(call("t4", 3, "c1"), false)
	rec, err := other.Lookup(ctx, answer("t2", 2), hashOf(answer("t2", 2).String()))
	if err != nil || !rec.Outcome.Intends {
		t.Fatalf("Lookup of an answer marked Intends: %+v, %v", rec, err)
	}
}
