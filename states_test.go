package lash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
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

// foldAll folds the session's whole log, from revision 0.
func foldAll(t *testing.T, s *Session) *state {
	t.Helper()
	st := newState(s.id)
	if err := s.fold(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	return st
}

// sameAsFold fails unless the state n kept for s equals a fresh fold of the
// whole log.
func sameAsFold(t *testing.T, n *Node, s *Session) {
	t.Helper()
	fresh := foldAll(t, s)
	got := *kept(t, n, s.id)
	got.since, fresh.since = 0, 0 // entries since a snapshot: which one each started from
	// What the last snapshot encoded is kept for the next one only.
	if got.enc != nil {
		got.size -= int64(len(got.enc.hist) + len(got.enc.keys))
	}
	got.enc, got.newKeys = nil, nil
	got.frame, fresh.frame = nil, nil // where the history lives
	if !reflect.DeepEqual(&got, fresh) {
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
	if st.turns != 3 || st.attempts != 0 {
		t.Fatalf("kept state: %d turns, %d attempts; want 3 and 0", st.turns, st.attempts)
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
	// A long TTL: no heartbeat or lease renewal on the connection while a
	// turn is measured.
	n := r.nodeOn(nc, "a", WithLeaseTTL(time.Minute))
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
	// journal: past them a turn's writes and reads stop growing. The
	// fewest of ten turns leaves out anything else on the connection.
	fewest := func(from int) (msgs, bytes uint64) {
		msgs, bytes = math.MaxUint64, math.MaxUint64
		for i := from; i < from+10; i++ {
			m, b := turnReads(i)
			msgs, bytes = min(msgs, m), min(bytes, b)
		}
		return msgs, bytes
	}
	for i := 1; i < 40; i++ {
		turnReads(i)
	}
	youngMsgs, youngBytes := fewest(40)
	for i := 50; i < 160; i++ {
		turnReads(i)
	}
	msgs, bytes := fewest(160)
	if msgs != youngMsgs || bytes > youngBytes+youngBytes/50 {
		t.Fatalf("turns 160-169 read at least %d messages, %d bytes; turns 40-49 %d messages, %d bytes: "+
			"a turn's reads must not grow with the session's history", msgs, bytes, youngMsgs, youngBytes)
	}
}

// A node that does not keep a session starts from its newest snapshot on
// the log: it reads the snapshot and the entries after it, not the
// session's whole log, and folds to the same state.
func TestColdLoadFromSnapshot(t *testing.T) {
	r := newRig(t)
	a := r.node("a", WithLeaseTTL(time.Minute))
	sa := a.Session("s1")
	const turns = 100 // two entries each: snapshots at 64 and 128
	for i := range turns {
		if _, _, err := sa.Send(r.ctx, fmt.Sprint(i), Input{Text: "Weather?"}); err != nil {
			t.Fatal(err)
		}
		if _, err := sa.Run(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	a.snapWrites.Wait()
	snap, err := a.log.LastSnapshot(r.ctx, "s1")
	if err != nil {
		t.Fatalf("no snapshot after %d turns: %v", turns, err)
	}
	fromSnap, err := decodeState("s1", snap.Data)
	if err != nil {
		t.Fatal(err)
	}
	if fromSnap.turns < turns-snapshotEvery/2 {
		t.Fatalf("newest snapshot holds %d turns of %d", fromSnap.turns, turns)
	}

	nc := r.conn()
	b := r.nodeOn(nc, "b", WithLeaseTTL(time.Minute))
	sb := b.Session("s1")
	if _, _, err := sb.Send(r.ctx, "last", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	before := nc.Stats().InMsgs
	if res, err := sb.Run(r.ctx); err != nil || len(res) != 1 {
		t.Fatalf("run on b: %v, %v", res, err)
	}
	// The snapshot, at most snapshotEvery entries after it, and the turn's
	// own round trips; the log holds more than 2*turns entries.
	if got := nc.Stats().InMsgs - before; got > snapshotEvery+30 {
		t.Fatalf("the first run on a node that keeps no state read %d messages; want at most %d", got, snapshotEvery+30)
	}
	sameAsFold(t, b, sb)
	tr, err := sb.Transcript(r.ctx)
	if all := foldAll(t, sb).history; err != nil || !reflect.DeepEqual(tr, all) {
		t.Fatalf("transcript from the snapshot: %d messages, %v; the whole log holds %d", len(tr), err, len(all))
	}
}

// A kept state the log does not follow (its stream made anew, say) is
// passed over at the fence: the run folds the log from the start and the
// session goes on.
func TestKeptStateNotOfTheLog(t *testing.T) {
	r := newRig(t)
	a := r.node("a")
	s := a.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	st := a.states.take("s1")
	st.rev += 1 << 30
	a.states.put(st)
	if _, _, err := s.Send(r.ctx, "k2", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 {
		t.Fatalf("run with a state ahead of the log: %+v, %v; want the turn", res, err)
	}
	sameAsFold(t, a, s)
}

// deleteSession deletes a session as lash-admin sessions delete does.
func deleteSession(t *testing.T, c *streams.Client, id string) {
	t.Helper()
	if _, err := lifecycle.DeleteSession(context.Background(), c, id, "test"); err != nil {
		t.Fatal(err)
	}
}

// A node that kept a session's state finds, when its fence meets a log
// another node wrote after the session was deleted, that the state is of
// the deleted session: it starts from nothing, and the deleted history
// reaches no model request.
func TestKeptStateOfADeletedSession(t *testing.T) {
	r := newRig(t)
	a, b := r.node("a"), r.node("b")
	sa := a.Session("s1")
	if _, _, err := sa.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	kept(t, a, "s1")
	deleteSession(t, a.Streams(), "s1")
	sb := b.Session("s1")
	// The deleted input's key is still in the stream's dedupe window: it
	// takes nothing, and Send says so.
	if _, _, err := sb.Send(r.ctx, "k1", Input{Text: "Hello again"}); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("a deleted input's key within the dedupe window: %v", err)
	}
	if _, _, err := sb.Send(r.ctx, "k9", Input{Text: "Hello again"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.models.Reset()
	if _, _, err := sa.Send(r.ctx, "k10", Input{Text: "And now?"}); err != nil {
		t.Fatal(err)
	}
	if res, err := sa.Run(r.ctx); err != nil || len(res) != 1 {
		t.Fatalf("run after the deletion: %+v, %v", res, err)
	}
	seen := r.models.Seen()
	if len(seen) == 0 {
		t.Fatal("no model request")
	}
	for _, m := range seen[0].Request.Messages {
		if m.Text == "Weather in Oslo?" {
			t.Fatalf("the deleted history reached a model request: %s: %q", m.Role, m.Text)
		}
	}
	sameAsFold(t, a, sa)
}

// A snapshot a node's background writer took before the session was
// deleted, landing after the purges, is of the deleted session: a node
// that keeps no state of the new one does not start from it.
func TestSnapshotOfADeletedSession(t *testing.T) {
	r := newRig(t)
	a, b, c := r.node("a"), r.node("b"), r.node("c")
	sa := a.Session("s1")
	if _, _, err := sa.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	st := a.states.take("s1")
	ss, err := takeState(st)
	if err != nil {
		t.Fatal(err)
	}
	data, err := ss.encode()
	if err != nil {
		t.Fatal(err)
	}
	deleteSession(t, a.Streams(), "s1")
	if err := a.log.PutSnapshot(r.ctx, "s1", sessionlog.Snapshot{Rev: ss.Rev, Data: data}); err != nil {
		t.Fatal(err)
	}
	sb := b.Session("s1")
	if _, _, err := sb.Send(r.ctx, "k9", Input{Text: "Hello again"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.models.Reset()
	sc := c.Session("s1")
	if _, _, err := sc.Send(r.ctx, "k10", Input{Text: "And now?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	seen := r.models.Seen()
	if len(seen) == 0 {
		t.Fatal("no model request")
	}
	tr, err := sc.Transcript(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append(seen[0].Request.Messages, tr...) {
		if m.Text == "Weather in Oslo?" {
			t.Fatalf("the deleted history came back through a snapshot written before the deletion: %s %q", m.Role, m.Text)
		}
	}
}

// A consume whose body can never be read (its object lost) is passed over
// like a commit's: the run folds past it and the session's next input
// gets its turn, where the fold used to fail before the fence, every run.
func TestConsumeBodyLost(t *testing.T) {
	r := newRig(t)
	a := r.node("a")
	s := a.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	last := kept(t, a, "s1")
	lost := &sessionlog.Entry{Kind: sessionlog.KindConsume, Token: last.newest, Turn: fmt.Sprintf("in-%d", last.cursor), Hash: [32]byte{1}, BodySize: 100 << 10}
	data, err := msgpack.Marshal(lost)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Streams().Publish(r.ctx, streams.Publication{Subject: "lash.sess.s1.ev", Data: data}); err != nil {
		t.Fatal(err)
	}
	a.states.take("s1") // fold the log from the start
	if _, _, err := s.Send(r.ctx, "k2", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Run(r.ctx); err != nil || len(res) != 1 {
		t.Fatalf("run after a consume whose body is lost: %+v, %v; want the turn", res, err)
	}
	tr, err := s.Transcript(r.ctx)
	users := 0
	for _, m := range tr {
		if m.Role == turn.RoleUser {
			users++
		}
	}
	if err != nil || users != 2 {
		t.Fatalf("transcript: %d user messages, %v; want two turns'", users, err)
	}
}

// The kept states stay within their count and their size: the least
// recently run go first, and a state larger than the whole bound is not
// kept at all.
func TestStatesBounded(t *testing.T) {
	c := newStates(3, 1000)
	put := func(id string, size int64) { c.put(&state{id: id, size: size}) }
	put("a", 100)
	put("b", 100)
	put("c", 100)
	put("d", 100) // past the count: a goes
	if c.take("a") != nil || c.len() != 3 {
		t.Fatalf("after four puts of three: a kept, or %d kept", c.len())
	}
	put("e", 900) // past the size: b and c go (d and e make 1000)
	if c.take("b") != nil || c.take("c") != nil || c.len() != 2 {
		t.Fatalf("past the size bound: %d kept, want d and e", c.len())
	}
	put("f", 1001)
	if c.take("f") != nil {
		t.Fatal("a state larger than the whole bound was kept")
	}
	if st := c.take("e"); st == nil || c.bytes != 100 || c.take("d") == nil {
		t.Fatalf("take(e) = %v, %d bytes left; want e and 100", st, c.bytes)
	}
}

// A run whose lease comes back with the token of this node's last run (its
// release did not land) finds the log ending with that token's own write.
// It still fences, so a crash in its turn leaves the turn begun: the next
// run replays the model call it recorded instead of calling the model again.
func TestReusedTokenStillFences(t *testing.T) {
	r := newRig(t)
	conn := r.conn()
	var a *Node
	stage := 0
	a = r.nodeOn(conn, "a", withBoundary(func(name string) error {
		switch {
		case stage < 2 && name == "after-commit":
			// Renew the lease behind the run's back, as a renewal landing
			// while it stops would: its release then misses, and the next
			// run gets the same token.
			key, _ := leases.Key("sess", "s1")
			if _, err := leases.New(a.Streams(), a.Owner()).Claim(r.ctx, key, time.Second); err != nil {
				t.Error(err)
			}
		case stage == 2 && name == "after-record llm-call":
			conn.Close()
			return errCrash
		}
		return nil
	}))
	s := a.Session("s1")
	for stage = range 2 {
		if _, _, err := s.Send(r.ctx, fmt.Sprint("k", stage), Input{Text: "Weather?"}); err != nil {
			t.Fatal(err)
		}
		if res, err := s.Run(r.ctx); err != nil || len(res) != 1 {
			t.Fatalf("run %d: %+v, %v; want its turn committed", stage, res, err)
		}
	}
	stage = 2
	if _, _, err := s.Send(r.ctx, "k2", Input{Text: "And tomorrow?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("third run: %v, want the crash", err)
	}
	calls := r.models.Requests()
	b := r.node("b")
	res := runUntilFree(t, b.Session("s1"))
	if len(res) != 1 || res[0].Replayed == 0 {
		t.Fatalf("b committed %+v; want the third turn with a's model call replayed", res)
	}
	if got := r.models.Requests() - calls; got != 0 {
		t.Fatalf("b made %d model requests for a turn whose model call a recorded", got)
	}
}

// len is the number of states kept.
func (c *states) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// A snapshot encodes what is new since the session's last one and copies
// the rest: each snapshot decodes to the state it was taken from, and the
// second one's encoding starts with the first one's.
func TestSnapshotEncodesWhatIsNew(t *testing.T) {
	st := newState("s1")
	rev := uint64(0)
	commit := func(i int) {
		rev += 2
		in := sessionlog.InputUse{Seq: rev - 1, Key: fmt.Sprintf("key-%03d", 100-i), Hash: [32]byte{byte(i)}}
		st.committed(rev, 1, nil, &sessionlog.TurnBody{InputCursor: rev - 1, Inputs: []sessionlog.InputUse{in},
			Outcome: turn.Outcome{Messages: []turn.Message{{Role: turn.RoleUser, Text: fmt.Sprint("question ", i)},
				{Role: turn.RoleAssistant, Text: "answer", ToolCalls: []turn.ToolCall{{ID: "c", Name: "echo", Arguments: "{}"}}}}}})
	}
	check := func(ss *snapshotOut) {
		t.Helper()
		data, err := ss.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeState("s1", data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.history, st.history) || !reflect.DeepEqual(got.keys, st.keys) || got.rev != st.rev || got.cursor != st.cursor {
			t.Fatalf("snapshot decodes to %d messages and %d keys at %d; the state has %d and %d at %d",
				len(got.history), len(got.keys), got.rev, len(st.history), len(st.keys), st.rev)
		}
	}
	for i := range 20 {
		commit(i)
	}
	first, err := takeState(st)
	if err != nil {
		t.Fatal(err)
	}
	check(first)
	for i := 20; i < 50; i++ {
		commit(i)
	}
	if len(st.newKeys) != 30 {
		t.Fatalf("%d keys remembered since the snapshot, want 30", len(st.newKeys))
	}
	second, err := takeState(st)
	if err != nil {
		t.Fatal(err)
	}
	check(second)
	if !bytes.HasPrefix(second.History, first.History) || !bytes.HasPrefix(second.Keys, first.Keys) ||
		len(second.History) == len(first.History) || st.newKeys != nil {
		t.Fatal("the second snapshot encoded its history or keys anew")
	}
	// The first snapshot, still being written say, is as it was.
	data, err := first.encode()
	if err != nil {
		t.Fatal(err)
	}
	was, err := decodeState("s1", data)
	if err != nil || !reflect.DeepEqual(was.history, st.history[:40]) || len(was.keys) != 20 {
		t.Fatalf("the first snapshot changed: %v", err)
	}
}

// A session's history stays in its frame as turns append to it: the frame
// moves a few times as the history grows, not at every turn, and always
// holds the history right after its free element.
func TestHistoryStaysFramed(t *testing.T) {
	st := newState("s1")
	moves := 0
	var last *turn.Message
	for i := range 1000 {
		st.extend([]turn.Message{{Role: turn.RoleUser, Text: fmt.Sprint(i)}, {Role: turn.RoleAssistant, Text: "ok"}})
		f := st.framed()
		if len(f) != 1+len(st.history) || &f[1] != &st.history[0] {
			t.Fatalf("turn %d: the frame does not hold the history", i)
		}
		if &f[0] != last {
			moves++
			last = &f[0]
		}
	}
	if moves > 30 {
		t.Fatalf("the history moved %d times in 1000 turns", moves)
	}
	// A history read from a snapshot moves into a frame once.
	st = newState("s2")
	st.history = []turn.Message{{Role: turn.RoleUser, Text: "hi"}}
	if f := st.framed(); &f[1] != &st.history[0] || cap(f) <= len(f) {
		t.Fatal("a history without a frame was not framed with room")
	}
}
