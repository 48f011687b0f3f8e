package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

func body(s string) []byte { return []byte("commit body: " + s) }

type logEntry struct {
	seq   uint64
	kind  sessionlog.Kind
	token uint64
	turn  string
	body  string
}

func (e logEntry) String() string {
	if e.kind == sessionlog.KindCommit {
		return fmt.Sprintf("%d:%s(t%d,%s,%q)", e.seq, e.kind, e.token, e.turn, e.body)
	}
	return fmt.Sprintf("%d:%s(t%d)", e.seq, e.kind, e.token)
}

func readLog(t *testing.T, ctx context.Context, lg *sessionlog.Log, sid string) []logEntry {
	t.Helper()
	var out []logEntry
	read(t, "Read("+sid+")", func() error {
		out = nil
		return lg.Read(ctx, sid, 0, func(seq uint64, e *sessionlog.Entry) error {
			out = append(out, logEntry{seq, e.Kind, e.Token, e.Turn, string(e.Body)})
			return nil
		})
	})
	return out
}

func wantLog(t *testing.T, ctx context.Context, lg *sessionlog.Log, sid string, want ...logEntry) {
	t.Helper()
	got := readLog(t, ctx, lg, sid)
	if !slices.Equal(got, want) {
		t.Fatalf("log of %s:\n got %v\nwant %v", sid, got, want)
	}
	head, err := lg.Head(ctx, sid)
	if err != nil {
		t.Fatalf("Head(%s): %v", sid, err)
	}
	if len(want) > 0 && head.Seq != want[len(want)-1].seq {
		t.Fatalf("Head(%s) = %d; want %d", sid, head.Seq, want[len(want)-1].seq)
	}
}

func fenceEntry(seq, token uint64) logEntry {
	return logEntry{seq: seq, kind: sessionlog.KindFence, token: token}
}

func commitEntry(seq, token uint64, turn string) logEntry {
	return logEntry{seq: seq, kind: sessionlog.KindCommit, token: token, turn: turn, body: string(body(turn))}
}

func fence(t *testing.T, ctx context.Context, lg *sessionlog.Log, sid string, token uint64, owner string) sessionlog.Position {
	t.Helper()
	pos, err := lg.Fence(ctx, sid, token, owner)
	if err != nil {
		t.Fatalf("Fence(%s, %d): %v", sid, token, err)
	}
	if pos.Session() != sid || pos.Token() != token || pos.Seq() == 0 {
		t.Fatalf("Fence(%s, %d) = %+v", sid, token, pos)
	}
	return pos
}

func commit(t *testing.T, ctx context.Context, lg *sessionlog.Log, pos sessionlog.Position, turnID string) sessionlog.Position {
	t.Helper()
	next, err := lg.Commit(ctx, pos, turnID, body(turnID))
	if err != nil {
		t.Fatalf("Commit(%s, %s, token %d, after %d): %v", pos.Session(), turnID, pos.Token(), pos.Seq(), err)
	}
	if next.Seq() <= pos.Seq() || next.Token() != pos.Token() {
		t.Fatalf("Commit(%s, %s) after %d returned %+v", pos.Session(), turnID, pos.Seq(), next)
	}
	return next
}

type commitResult struct {
	seq uint64
	err error
}

func commitSeq(pos sessionlog.Position, err error) commitResult { return commitResult{pos.Seq(), err} }

// testRacingCommits: of 8 commits racing on one head, exactly one lands;
// the others fail with a conflict and change nothing.
func testRacingCommits(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	sid := "session racing.commits"
	lg := sessionlog.New(d.client)
	const token = 7
	head := fence(t, ctx, lg, sid, token, "writer")
	res := race(racers, func(i int) commitResult {
		turnID := fmt.Sprintf("turn-%d", i)
		return commitSeq(lg.Commit(ctx, head, turnID, body(turnID)))
	})
	winner := -1
	for i, r := range res {
		switch {
		case r.err == nil:
			if winner >= 0 {
				t.Fatalf("two racing commits landed: turn-%d at %d and turn-%d at %d", winner, res[winner].seq, i, r.seq)
			}
			winner = i
		case !errors.Is(r.err, streams.ErrConflict):
			t.Errorf("racing commit turn-%d: got %v, want streams.ErrConflict", i, r.err)
		case errors.Is(r.err, sessionlog.ErrFenced) || errors.Is(r.err, sessionlog.ErrCommitConflict):
			t.Errorf("racing commit turn-%d of the same holder: got %v, want a plain conflict", i, r.err)
		}
	}
	if winner < 0 {
		t.Fatalf("no racing commit landed: %v", res)
	}
	wantLog(t, ctx, lg, sid, fenceEntry(head.Seq(), token), commitEntry(res[winner].seq, token, fmt.Sprintf("turn-%d", winner)))
}

// testRacingRetries: 8 concurrent attempts of the same commit stamp (a
// writer retrying while its first attempt is in flight) all get the one
// revision it landed at.
func testRacingRetries(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	sid := "retries"
	lg := sessionlog.New(d.client)
	const token = 3
	head := fence(t, ctx, lg, sid, token, "writer")
	res := race(racers, func(int) commitResult {
		return commitSeq(lg.Commit(ctx, head, "turn-1", body("turn-1")))
	})
	var landed uint64
	for _, r := range res {
		if r.err == nil {
			landed = r.seq
		}
	}
	for i, r := range res {
		switch {
		case r.err != nil:
			hint := ""
			if strings.Contains(r.err.Error(), "10158") {
				hint = " BUG in streams.Append: JetStream error 10158 (\"duplicate message id is in process\", " +
					"the first attempt is still being replicated) is passed up as an opaque error instead of " +
					"waiting for the first attempt and returning its revision, or at least a typed retryable error"
			}
			t.Errorf("attempt %d of one commit stamp: %v; want revision %d, where the stamp landed.%s", i, r.err, landed, hint)
		case r.seq != landed || r.seq <= head.Seq():
			t.Errorf("attempt %d of one commit stamp: revision %d; want %d", i, r.seq, landed)
		}
	}
	if landed == 0 {
		t.Fatal("no attempt of the stamp returned its revision")
	}
	wantLog(t, ctx, lg, sid, fenceEntry(head.Seq(), token), commitEntry(landed, token, "turn-1"))
}

// testFencedWriter: once a newer holder fenced, the older one can neither
// commit at the head it had nor fence again.
func testFencedWriter(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	sid := "fenced"
	lgA := sessionlog.New(d.client)
	lgB := sessionlog.New(d.reopen(t))

	headA := fence(t, ctx, lgA, sid, 5, "A")
	headB := fence(t, ctx, lgB, sid, 9, "B")
	want := []logEntry{fenceEntry(headA.Seq(), 5), fenceEntry(headB.Seq(), 9)}

	_, err := lgA.Commit(ctx, headA, "turn-a", body("turn-a"))
	if err == nil || !(errors.Is(err, sessionlog.ErrFenced) || errors.Is(err, streams.ErrConflict)) {
		t.Fatalf("stale holder's commit at its old head: got %v, want ErrFenced or ErrConflict", err)
	}
	var fe *sessionlog.FencedError
	if errors.As(err, &fe) && (fe.Token != 5 || fe.Holder != 9 || fe.Seq != headB.Seq() || fe.Session != sid) {
		t.Fatalf("FencedError %+v; want session %s token 5 holder 9 at %d", fe, sid, headB.Seq())
	}
	wantLog(t, ctx, lgA, sid, want...)

	for _, tok := range []uint64{4, 5} {
		_, err = lgA.Fence(ctx, sid, tok, "A")
		if !errors.As(err, &fe) || !errors.Is(err, sessionlog.ErrFenced) {
			t.Fatalf("fence with token %d under a fence of token 9: got %v, want *FencedError", tok, err)
		}
		if fe.Token != tok || fe.Holder != 9 || fe.Seq != headB.Seq() {
			t.Fatalf("FencedError %+v; want token %d holder 9 at %d", fe, tok, headB.Seq())
		}
	}
	// The holder of token 9 fencing again (a retry after a lost ack) gets
	// its own fence back and writes nothing.
	if again, err := lgB.Fence(ctx, sid, 9, "B"); err != nil || again != headB {
		t.Fatalf("repeated fence of token 9: %+v, %v; want %+v", again, err, headB)
	}
	wantLog(t, ctx, lgA, sid, want...)

	// The new holder is unaffected, and the old one stays out after it
	// committed.
	seqB := commit(t, ctx, lgB, headB, "turn-b")
	want = append(want, commitEntry(seqB.Seq(), 9, "turn-b"))
	_, err = lgA.Commit(ctx, headA, "turn-a", body("turn-a"))
	if !errors.Is(err, sessionlog.ErrFenced) && !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("stale holder's commit after the new holder committed: got %v", err)
	}
	wantLog(t, ctx, lgA, sid, want...)
}

// testRetryAfterDedupeWindow: a commit retried after the msg-id window has
// passed, by a worker holding no lease, while a newer holder has fenced,
// still returns the revision it landed at and adds nothing.
func testRetryAfterDedupeWindow(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{DuplicateWindow: time.Second})
	sid := "dedupe window"
	lg := sessionlog.New(d.client)
	key := leaseKey(t, sid)
	a := node(t, ctx, d.client, "a")
	la := claim(t, ctx, a, key, longTTL)
	head := fence(t, ctx, lg, sid, la.Token, "a")
	seq := commit(t, ctx, lg, head, "turn-1")

	// A probe published after the commit with a fixed msg id is deduped
	// until the window has passed for it, hence for the commit too.
	probeSubj, err := d.client.Subjects().SessionInputs("probe")
	if err != nil {
		t.Fatal(err)
	}
	probe := streams.Publication{Subject: probeSubj, Data: []byte("probe"), MsgID: "probe"}
	if _, dup, err := d.client.Publish(ctx, probe); err != nil || dup {
		t.Fatalf("first probe: duplicate=%v, %v", dup, err)
	}
	if _, dup, err := d.client.Publish(ctx, probe); err != nil || !dup {
		t.Fatalf("probe within the window: duplicate=%v, %v; want a duplicate", dup, err)
	}
	waited := time.Now()
	testenv.WaitFor(t, expiryTimeout, func() error {
		_, dup, err := d.client.Publish(ctx, probe)
		switch {
		case err != nil:
			return err
		case dup:
			return fmt.Errorf("the probe is still deduped %v after the commit", time.Since(waited))
		}
		return nil
	})

	// The holder's lease is gone and a newer holder has fenced.
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	b := node(t, ctx, d.client, "b")
	lb := claim(t, ctx, b, key, longTTL)
	headB := fence(t, ctx, lg, sid, lb.Token, "b")
	want := []logEntry{fenceEntry(head.Seq(), la.Token), commitEntry(seq.Seq(), la.Token, "turn-1"), fenceEntry(headB.Seq(), lb.Token)}

	// The retry: another connection, no lease, the same stamp and position.
	retry := sessionlog.New(d.reopen(t))
	got, err := retry.Commit(ctx, head, "turn-1", body("turn-1"))
	if err != nil || got != seq {
		t.Fatalf("retry after the dedupe window: %+v, %v; want the original %+v", got, err, seq)
	}
	wantLog(t, ctx, lg, sid, want...)
	var fs uint64
	var fe *sessionlog.Entry
	read(t, "FindCommit", func() (err error) { fs, fe, err = retry.FindCommit(ctx, sid, "turn-1", 0); return err })
	if fs != seq.Seq() || fe.Turn != "turn-1" || fe.Token != la.Token {
		t.Fatalf("FindCommit: %d %+v; want %d", fs, fe, seq.Seq())
	}
	// The same retry with another body is still a conflict, not a write.
	_, err = retry.Commit(ctx, head, "turn-1", body("turn-1 changed"))
	if !errors.Is(err, sessionlog.ErrCommitConflict) {
		t.Fatalf("changed retry after the window: got %v, want ErrCommitConflict", err)
	}
	wantLog(t, ctx, lg, sid, want...)
}

// testChangedHash: the same turn with other content is a commit conflict,
// right after its expected head and, within the dedupe window, at a newer
// one; the same content is the same commit.
func testChangedHash(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	sid := "changed"
	lg := sessionlog.New(d.client)
	const token = 4
	head := fence(t, ctx, lg, sid, token, "w")
	seqX := commit(t, ctx, lg, head, "turn-x")
	other := []byte("commit body: something else")
	wantConflict := func(what string, at sessionlog.Position) {
		t.Helper()
		_, err := lg.Commit(ctx, at, "turn-x", other)
		var ce *sessionlog.CommitConflictError
		if !errors.As(err, &ce) || !errors.Is(err, sessionlog.ErrCommitConflict) {
			t.Fatalf("%s: got %v, want *CommitConflictError", what, err)
		}
		if ce.Session != sid || ce.Seq != seqX.Seq() || ce.Have.Turn != "turn-x" || ce.Want.Turn != "turn-x" ||
			ce.Have.Hash != sessionlog.ContentHash(body("turn-x")) || ce.Want.Hash != sessionlog.ContentHash(other) {
			t.Fatalf("%s: conflict %+v does not carry both stamps", what, ce)
		}
	}
	wantConflict("changed body right after its expected head", head)
	wantConflict("changed body at the fresh head", seqX)
	seqY := commit(t, ctx, lg, seqX, "turn-y")
	wantConflict("changed body after another commit", seqY)
	// The same content is the same commit, wherever it is retried within
	// the window.
	// The same content is the same commit: retried at a newer position it
	// adds nothing and leaves the holder where it was.
	if got, err := lg.Commit(ctx, seqY, "turn-x", body("turn-x")); err != nil || got.Seq() != seqY.Seq() {
		t.Fatalf("same stamp at a newer head: %+v, %v; want the holder's position %d", got, err, seqY.Seq())
	}
	wantLog(t, ctx, lg, sid, fenceEntry(head.Seq(), token), commitEntry(seqX.Seq(), token, "turn-x"), commitEntry(seqY.Seq(), token, "turn-y"))
}

// testInputs: an input appended twice with one msg id is stored once;
// InputsAfter returns exactly the later inputs, in order.
func testInputs(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	sid := "inputs/1"
	lg := sessionlog.New(d.client)
	type in struct {
		id   string
		data string
	}
	sent := []in{{"m1", "hello"}, {"m2", "approve call 3"}, {"m3", "stop"}}
	var seqs []uint64
	for _, m := range sent {
		seq, dup, err := lg.AppendInput(ctx, sid, m.id, []byte(m.data))
		if err != nil || dup {
			t.Fatalf("AppendInput(%s): %d duplicate=%v %v", m.id, seq, dup, err)
		}
		again, dup, err := lg.AppendInput(ctx, sid, m.id, []byte(m.data))
		if err != nil || !dup || again != seq {
			t.Fatalf("AppendInput(%s) again: %d duplicate=%v %v; want %d, duplicate", m.id, again, dup, err, seq)
		}
		seqs = append(seqs, seq)
		// Another session's input in between must not show.
		if _, _, err := lg.AppendInput(ctx, "inputs/2", "other-"+m.id, []byte("other")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := lg.AppendInput(ctx, sid, "", []byte("x")); !errors.Is(err, sessionlog.ErrInvalid) {
		t.Fatalf("input without an idempotency key: got %v, want ErrInvalid", err)
	}
	after := func(cursor uint64) []sessionlog.Input {
		var got []sessionlog.Input
		read(t, fmt.Sprintf("InputsAfter(%d)", cursor), func() error {
			got = nil
			return lg.InputsAfter(ctx, sid, cursor, func(i sessionlog.Input) error { got = append(got, i); return nil })
		})
		return got
	}
	for k, cursor := range []uint64{0, seqs[0], seqs[1], seqs[2]} {
		got := after(cursor)
		if len(got) != len(sent)-k {
			t.Fatalf("InputsAfter(%d) = %+v; want %d inputs", cursor, got, len(sent)-k)
		}
		for j, g := range got {
			w := sent[k+j]
			if g.Seq != seqs[k+j] || g.MsgID != w.id || string(g.Data) != w.data {
				t.Fatalf("InputsAfter(%d)[%d] = %+v; want seq %d id %s data %q", cursor, j, g, seqs[k+j], w.id, w.data)
			}
		}
	}
	// A cursor between two inputs (the other session's revision).
	if got := after(seqs[1] - 1); len(got) != 2 || got[0].Seq != seqs[1] {
		t.Fatalf("InputsAfter(%d) = %+v; want inputs from %d", seqs[1]-1, got, seqs[1])
	}
}

// testSessionsIndependent: ids chosen per session (turn ids, input
// idempotency keys, fencing tokens) do not interfere across sessions of one
// deployment: what one session wrote never makes another session's write a
// "duplicate".
func testSessionsIndependent(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	lg := sessionlog.New(d.client)
	const bug = " BUG in sessionlog: its Nats-Msg-Id (\"commit:<turn>\", \"fence:<token>\", or the input key as it is) " +
		"is not scoped by session, and JetStream dedupes msg ids across the whole SESSIONS stream"

	t.Run("same-turn-id", func(t *testing.T) {
		ha := fence(t, ctx, lg, "a", 10, "x")
		hb := fence(t, ctx, lg, "b", 11, "y")
		sa := commit(t, ctx, lg, ha, "turn-1")
		sb, err := lg.Commit(ctx, hb, "turn-1", body("turn-1"))
		if err != nil || sb.Seq() <= hb.Seq() || sb.Seq() == sa.Seq() {
			t.Errorf("session b commits turn-1 after session a did (at %d): revision %d, %v; want a new revision after %d.%s",
				sa.Seq(), sb.Seq(), err, hb.Seq(), bug)
		}
		if err == nil {
			wantLog(t, ctx, lg, "b", fenceEntry(hb.Seq(), 11), commitEntry(sb.Seq(), 11, "turn-1"))
		}
		wantLog(t, ctx, lg, "a", fenceEntry(ha.Seq(), 10), commitEntry(sa.Seq(), 10, "turn-1"))
	})
	t.Run("same-input-key", func(t *testing.T) {
		sa, _, err := lg.AppendInput(ctx, "in-a", "key-1", []byte("for a"))
		if err != nil {
			t.Fatal(err)
		}
		sb, dup, err := lg.AppendInput(ctx, "in-b", "key-1", []byte("for b"))
		if err != nil || dup || sb == sa {
			t.Errorf("session in-b appends input key-1 after session in-a did (at %d): revision %d duplicate=%v %v; "+
				"want a new input: the acknowledged input is lost (§9.6).%s", sa, sb, dup, err, bug)
		}
		var got []string
		read(t, "InputsAfter", func() error {
			got = nil
			return lg.InputsAfter(ctx, "in-b", 0, func(i sessionlog.Input) error { got = append(got, string(i.Data)); return nil })
		})
		if !slices.Equal(got, []string{"for b"}) {
			t.Errorf("inputs of session in-b: %q; want [\"for b\"].%s", got, bug)
		}
	})
	t.Run("same-token", func(t *testing.T) {
		// Tokens from one lease bucket never repeat across sessions, but
		// the log takes any token: a fence must land on its own session or
		// fail, never return another session's revision.
		ha := fence(t, ctx, lg, "f-a", 20, "x")
		hb, err := lg.Fence(ctx, "f-b", 20, "y")
		head, herr := lg.Head(ctx, "f-b")
		if herr != nil {
			t.Fatal(herr)
		}
		if err == nil && (head.Seq != hb.Seq() || head.Entry == nil || head.Entry.Kind != sessionlog.KindFence || head.Entry.Token != 20) {
			t.Errorf("Fence(f-b, 20) after Fence(f-a, 20) at %d returned revision %d with no error, but the head of f-b is %d (%+v).%s",
				ha.Seq(), hb.Seq(), head.Seq, head.Entry, bug)
		}
	})
}

// testMalformedHead: a message lash never writes, published on a session's
// log, neither blocks the session nor lets an older token back in: a newer
// holder fences over it, an older one is still fenced out, and FindCommit
// passes over it.
func testMalformedHead(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	sid := "malformed"
	lg := sessionlog.New(d.client)
	first := fence(t, ctx, lg, sid, 5, "a")
	committed := commit(t, ctx, lg, first, "turn-1")
	subj, err := d.client.Subjects().SessionEvents(sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.client.Publish(ctx, streams.Publication{Subject: subj, Data: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Head(ctx, sid); !errors.Is(err, sessionlog.ErrMalformed) {
		t.Fatalf("Head over garbage: %v, want ErrMalformed", err)
	}
	var fe *sessionlog.FencedError
	if _, err := lg.Fence(ctx, sid, 4, "old"); !errors.As(err, &fe) || fe.Holder != 5 {
		t.Fatalf("an older token over a malformed head: %v, want fenced out by 5", err)
	}
	pos := fence(t, ctx, lg, sid, 9, "b")
	next := commit(t, ctx, lg, pos, "turn-2")
	seq, e, err := lg.FindCommit(ctx, sid, "turn-2", 0)
	if err != nil || seq != next.Seq() || e.Token != 9 {
		t.Fatalf("FindCommit past the garbage: %d %+v %v", seq, e, err)
	}
	if seq, _, err := lg.FindCommit(ctx, sid, "turn-1", 0); err != nil || seq != committed.Seq() {
		t.Fatalf("FindCommit of the first turn: %d %v", seq, err)
	}
}

// testRecommitBeforePosition: a new holder that commits a turn an older
// holder already committed (within the dedupe window) learns it is
// committed and keeps its own position, so its next commit lands.
func testRecommitBeforePosition(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	sid := "recommit"
	lg := sessionlog.New(d.client)
	a := fence(t, ctx, lg, sid, 3, "a")
	commit(t, ctx, lg, a, "turn-1")
	b := fence(t, ctx, lg, sid, 8, "b")
	got, err := lg.Commit(ctx, b, "turn-1", body("turn-1"))
	if err != nil || got.Seq() != b.Seq() {
		t.Fatalf("recommit of turn-1 by the new holder: %+v %v; want its own position %d", got, err, b.Seq())
	}
	commit(t, ctx, lg, got, "turn-2")
}

// testSnapshots: the newest snapshot is the one read, older ones are
// dropped, a large one goes through the object store, and one that does
// not match its hash is refused, never used.
func testSnapshots(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{InlineBytes: 1 << 10})
	lg := sessionlog.New(d.client, sessionlog.WithBlobs(blobStore(d.client)))
	if _, err := lg.LastSnapshot(ctx, "snap/1"); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("LastSnapshot of a session without one: %v, want ErrNotFound", err)
	}
	small := sessionlog.Snapshot{Rev: 7, Data: []byte("state at 7")}
	large := sessionlog.Snapshot{Rev: 9, Data: bytes.Repeat([]byte("state at 9 "), 1000)}
	for _, s := range []sessionlog.Snapshot{small, large} {
		if err := lg.PutSnapshot(ctx, "snap/1", s); err != nil {
			t.Fatalf("PutSnapshot(%d): %v", s.Rev, err)
		}
		testenv.WaitFor(t, settleTimeout, func() error {
			got, err := lg.LastSnapshot(ctx, "snap/1")
			if err != nil || got.Rev != s.Rev || !bytes.Equal(got.Data, s.Data) {
				return fmt.Errorf("LastSnapshot after putting %d: rev %d, %d bytes, %v", s.Rev, got.Rev, len(got.Data), err)
			}
			return nil
		})
	}
	subj, err := d.client.Subjects().SessionSnapshots("snap/1")
	if err != nil {
		t.Fatal(err)
	}
	var kept []uint64
	if err := d.client.Read(ctx, subj, 0, func(m *streams.Msg) error { kept = append(kept, m.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 {
		t.Fatalf("%d snapshots kept on the subject; want the newest only", len(kept))
	}
	// Something that is no snapshot of this session, on its subject.
	if _, _, err := d.client.Publish(ctx, streams.Publication{Subject: subj, Data: []byte{0x81, 0xa1, 'r', 0x05}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, settleTimeout, func() error {
		if _, err := lg.LastSnapshot(ctx, "snap/1"); !errors.Is(err, sessionlog.ErrMalformed) {
			return fmt.Errorf("LastSnapshot of a message that does not match its hash: %v, want ErrMalformed", err)
		}
		return nil
	})
}
