package projector_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type env struct {
	t   testing.TB
	ctx context.Context
	c   *streams.Client
	nc  *nats.Conn
	log *sessionlog.Log
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := testenv.RunJetStream(t)
	nc := srv.Conn(t)
	ctx := context.Background()
	c, err := streams.Open(ctx, nc, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, c: c, nc: nc, log: sessionlog.New(c)}
}

func (e *env) open(dir string, folds ...projector.Fold) *projector.Projector {
	e.t.Helper()
	if len(folds) == 0 {
		folds = []projector.Fold{projector.NewSessions("lash")}
	}
	p, err := projector.Open(dir, e.c, projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>", Folds: folds})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func body(t testing.TB, turnID string, n int, cursor uint64) []byte {
	b, err := sessionlog.EncodeTurnBody(&sessionlog.TurnBody{InputCursor: cursor, Outcome: turn.Outcome{
		Status: turn.StatusDone, Termination: turn.Termination{Reason: turn.NaturalEnd}, Iterations: 1,
		Usage:    turn.Usage{InputTokens: int64(10 * n), OutputTokens: int64(n)},
		Messages: []turn.Message{{Role: turn.RoleUser, Text: "q " + turnID}, {Role: turn.RoleAssistant, Text: "a " + turnID}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeSessions writes turns commits spread over sessions sessions, each
// commit consuming one input.
func (e *env) writeSessions(sessions, turns int) { e.writeNamed("session", sessions, turns) }

// writeNamed publishes the log entries and inputs a driver would write, as
// fast as the server takes them: the projector reads messages, not how
// they were written, so the test skips the compare-and-set round trips.
func (e *env) writeNamed(name string, sessions, turns int) {
	e.t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	var acks []jetstream.PubAckFuture
	publish := func(subj string, data []byte, msgID string) {
		m := nats.NewMsg(subj)
		m.Data = data
		if msgID != "" {
			m.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			e.t.Fatal(err)
		}
		acks = append(acks, f)
	}
	fence, _ := msgpackEntry(&sessionlog.Entry{Kind: sessionlog.KindFence, Token: 1, Owner: "writer"})
	for s := range sessions {
		sid := fmt.Sprintf("%s-%03d", name, s)
		ev, _ := e.c.Subjects().SessionEvents(sid)
		publish(ev, fence, "")
	}
	// Inputs first, then the commits that consume them, round by round.
	for i := range turns / sessions {
		inputs := len(acks)
		for s := range sessions {
			in, _ := e.c.Subjects().SessionInputs(fmt.Sprintf("%s-%03d", name, s))
			publish(in, []byte("hello"), fmt.Sprintf("%s:%d:%d", name, s, i))
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			e.t.Fatal("inputs not acknowledged")
		}
		for s := range sessions {
			ev, _ := e.c.Subjects().SessionEvents(fmt.Sprintf("%s-%03d", name, s))
			var inSeq uint64
			select {
			case ack := <-acks[inputs+s].Ok():
				inSeq = ack.Sequence
			case err := <-acks[inputs+s].Err():
				e.t.Fatal(err)
			}
			turnID := fmt.Sprintf("turn-%d", i)
			data, err := encodeCommit(1, turnID, body(e.t, turnID, i, inSeq))
			if err != nil {
				e.t.Fatal(err)
			}
			publish(ev, data, "")
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		e.t.Fatal("writes not acknowledged")
	}
	for _, f := range acks {
		select {
		case err := <-f.Err():
			e.t.Fatal(err)
		default:
		}
	}
}

// dump reads every key and value of a closed projector's store.
func dump(t *testing.T, dir string) map[string]string {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: noLog{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	return out
}

func sameStore(t *testing.T, a, b map[string]string) {
	t.Helper()
	if len(a) != len(b) {
		t.Errorf("stores hold %d and %d keys", len(a), len(b))
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			t.Fatalf("key %q differs: %q vs %q (present %v)", k, v, w, ok)
		}
	}
}

// Folding while commits land equals folding everything from zero.
func TestIncrementalEqualsRebuild(t *testing.T) {
	e := newEnv(t)
	live := t.TempDir()
	p := e.open(live)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	e.writeSessions(100, 10000)
	last, err := e.c.LastSeq(e.ctx, streams.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(e.ctx, time.Minute)
	defer wcancel()
	if err := p.WaitFor(wctx, last); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	heads, err := p.Sessions()
	if err != nil || len(heads) != 100 {
		t.Fatalf("%d sessions, %v", len(heads), err)
	}
	h, err := p.Session("session-042")
	if err != nil || h.Turns != 100 || h.Messages != 200 || h.PendingInputs != 0 || h.Inputs != 100 || h.Fence != 1 {
		t.Fatalf("head %+v, %v", h, err)
	}
	tr, err := p.Transcript("session-042", 198)
	if err != nil || len(tr) != 2 || tr[1].Message.Text != "a turn-99" {
		t.Fatalf("transcript tail %+v, %v", tr, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	fresh := t.TempDir()
	q := e.open(fresh)
	if err := q.CatchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	if q.Applied() != last {
		t.Fatalf("rebuild reached %d of %d", q.Applied(), last)
	}
	q.Close()
	sameStore(t, dump(t, live), dump(t, fresh))

	// Rebuild in place gives the same store again.
	r := e.open(live)
	if err := r.Rebuild(e.ctx); err != nil {
		t.Fatal(err)
	}
	r.Close()
	sameStore(t, dump(t, live), dump(t, fresh))
}

// crashAt wraps a fold and fails, like a process dying, on one message.
type crashAt struct {
	projector.Fold
	seq uint64
}

var errCrash = errors.New("crash")

// Version keeps the wrapped fold's layout: reopening with the fold alone
// must not start over.
func (c *crashAt) Version() int {
	if v, ok := c.Fold.(projector.Versioned); ok {
		return v.Version()
	}
	return 0
}

func (c *crashAt) Apply(tx *projector.Txn, m *streams.Msg) error {
	if m.Seq == c.seq {
		return errCrash
	}
	return c.Fold.Apply(tx, m)
}

// countFold counts in the store how often each message was applied.
type countFold struct{}

func (countFold) Name() string { return "count" }
func (countFold) Apply(tx *projector.Txn, m *streams.Msg) error {
	k := fmt.Appendf(nil, "%020d", m.Seq)
	n := 0
	if v, ok := tx.Memo(string(k)); ok {
		n = v.(int)
	} else if v, err := tx.Get(k); err == nil {
		fmt.Sscan(string(v), &n)
	} else if !errors.Is(err, projector.ErrNotFound) {
		return err
	}
	tx.SetMemo(string(k), n+1)
	return tx.Set(k, []byte(fmt.Sprint(n+1)))
}

// A projector stopped after a Pebble write, before the next message, and
// restarted applies every message exactly once; so does one stopped in the
// middle of an atomic batch, which it never applies in part.
func TestRestartAppliesNothingTwice(t *testing.T) {
	e := newEnv(t)
	e.writeSessions(4, 40)
	// An atomic batch of four commits on four sessions.
	var entries []streams.BatchEntry
	for i := range 4 {
		sid := fmt.Sprintf("batch-%d", i)
		pos, err := e.log.Fence(e.ctx, sid, 2, "w")
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := e.c.Subjects().SessionEvents(sid)
		b := body(t, "turn-b", 1, 0)
		data, err := encodeCommit(2, "turn-b", b)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, streams.BatchEntry{Publication: streams.Publication{Subject: subj, Data: data}, Expect: streams.Expect(pos.Seq())})
	}
	seqs, err := e.c.AppendBatch(e.ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	e.writeSessions(2, 10)
	last, _ := e.c.LastSeq(e.ctx, streams.Sessions)

	dir := t.TempDir()
	sessions := projector.NewSessions("lash")
	crashes := []uint64{5, 17, seqs[2], last - 1}
	for _, at := range crashes {
		p, err := projector.Open(dir, e.c, projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>", BatchSize: 1,
			Folds: []projector.Fold{countFold{}, &crashAt{Fold: sessions, seq: at}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CatchUp(e.ctx); !errors.Is(err, errCrash) {
			t.Fatalf("crash at %d: %v", at, err)
		}
		if got := p.Applied(); got != at-1 && !(at == seqs[2] && got == seqs[0]-1) {
			t.Fatalf("crash at %d left the cursor at %d", at, got)
		}
		if at == seqs[2] {
			// Nothing of the batch was applied, not even its first two.
			for _, s := range seqs {
				if _, err := p.Turn(fmt.Sprintf("batch-%d", s-seqs[0]), "turn-b"); !errors.Is(err, projector.ErrNotFound) {
					t.Fatalf("part of an interrupted batch was applied: %v", err)
				}
			}
		}
		p.Close()
	}
	p, err := projector.Open(dir, e.c, projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>", BatchSize: 1,
		Folds: []projector.Fold{countFold{}, sessions}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CatchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := p.Turn(fmt.Sprintf("batch-%d", i), "turn-b"); err != nil {
			t.Fatalf("batch commit %d: %v", i, err)
		}
	}
	p.Close()
	store := dump(t, dir)
	n := 0
	for k, v := range store {
		if bytes.HasPrefix([]byte(k), []byte("f/count/")) {
			n++
			if v != "1" {
				t.Fatalf("%s applied %s times", k, v)
			}
		}
	}
	if uint64(n) != last {
		t.Fatalf("%d messages counted, %d in the stream", n, last)
	}
}

func encodeCommit(token uint64, turnID string, b []byte) ([]byte, error) {
	return msgpackEntry(&sessionlog.Entry{Kind: sessionlog.KindCommit, Token: token, Turn: turnID,
		Hash: sessionlog.ContentHash(b), Body: b})
}

// A batch whose publisher never commits it is never stored, so never
// folded; the projection goes on with what follows.
func TestUncommittedBatchIsNeverApplied(t *testing.T) {
	e := newEnv(t)
	subj, _ := e.c.Subjects().SessionEvents("half")
	data, _ := msgpackEntry(&sessionlog.Entry{Kind: sessionlog.KindFence, Token: 1})
	for i := 1; i <= 3; i++ {
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set("Nats-Batch-Id", "never-committed")
		m.Header.Set("Nats-Batch-Sequence", fmt.Sprint(i))
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pos, err := e.log.Fence(e.ctx, "whole", 3, "w")
	if err != nil {
		t.Fatal(err)
	}
	p := e.open(t.TempDir())
	defer p.Close()
	if err := p.CatchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Session("half"); !errors.Is(err, projector.ErrNotFound) {
		t.Fatalf("uncommitted batch folded: %v", err)
	}
	if h, err := p.Session("whole"); err != nil || h.Revision != pos.Seq() {
		t.Fatalf("whole: %+v %v", h, err)
	}
}

// A message the fold cannot decode is set aside; the fold goes on.
func TestPoisonIsSetAside(t *testing.T) {
	e := newEnv(t)
	e.writeSessions(1, 2)
	subj, _ := e.c.Subjects().SessionEvents("session-000")
	bad, _, err := e.c.Publish(e.ctx, streams.Publication{Subject: subj, Data: []byte("not an entry")})
	if err != nil {
		t.Fatal(err)
	}
	e.writeNamed("after", 3, 3)
	p := e.open(t.TempDir())
	defer p.Close()
	if err := p.CatchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	q, err := p.Quarantine()
	if err != nil || len(q) != 1 || q[0].Seq != bad || q[0].Subject != subj || q[0].Fold != projector.SessionsFold ||
		string(q[0].Data) != "not an entry" || q[0].Reason == "" {
		t.Fatalf("quarantine %+v, %v", q, err)
	}
	for i := range 3 {
		if h, err := p.Session(fmt.Sprintf("after-%03d", i)); err != nil || h.Turns == 0 {
			t.Fatalf("session %d after the poison: %+v %v", i, h, err)
		}
	}
}

// WaitFor returns once the projector has folded a given write.
func TestReadYourWrites(t *testing.T) {
	e := newEnv(t)
	p := e.open(t.TempDir())
	defer p.Close()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go p.Run(ctx)
	pos, err := e.log.Fence(e.ctx, "ryw", 1, "w")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		turnID := fmt.Sprintf("t%d", i)
		if pos, err = e.log.Commit(e.ctx, pos, turnID, body(t, turnID, i, 0)); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(e.ctx, 10*time.Second)
		err := p.WaitFor(wctx, pos.Seq())
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		info, err := p.Turn("ryw", turnID)
		if err != nil || info.Seq != pos.Seq() || info.Ordinal != i+1 {
			t.Fatalf("turn %s: %+v %v", turnID, info, err)
		}
	}
	turns, err := p.Turns("ryw")
	if err != nil || len(turns) != 20 || turns[19].Turn != "t19" {
		t.Fatalf("turns: %d %v", len(turns), err)
	}
	short, cancelShort := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := p.WaitFor(short, pos.Seq()+100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a sequence never written: %v", err)
	}
}

type noLog struct{}

func (noLog) Infof(string, ...any)  {}
func (noLog) Errorf(string, ...any) {}
func (noLog) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}

// versioned gives a fold another layout version.
type versioned struct {
	*projector.Sessions
	v int
}

func (f versioned) Version() int { return f.v }

// A store folded under another layout of its folds is cleared when it
// opens and folded again from the stream's start, to the same entries.
func TestNewLayoutFoldsAgain(t *testing.T) {
	e := newEnv(t)
	e.writeSessions(3, 5)
	dir := t.TempDir()
	p := e.open(dir)
	if err := p.CatchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	before := dump(t, dir)

	p = e.open(dir, versioned{projector.NewSessions("lash"), 99})
	if p.Applied() != 0 {
		t.Fatalf("a store of another layout opened at %d; want it cleared", p.Applied())
	}
	if hs, err := p.Sessions(); err != nil || len(hs) != 0 {
		t.Fatalf("a store of another layout still holds %d sessions (%v)", len(hs), err)
	}
	if err := p.CatchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	after := dump(t, dir)
	delete(before, "m/layout")
	delete(after, "m/layout")
	sameStore(t, before, after)
}

// An input the fold sets aside and a node's consume then refuses: its
// quarantine entry keeps the input's payload whether the two are folded in
// one batch (a rebuild) or two (a live tail).
func TestQuarantineSameWhateverTheBatches(t *testing.T) {
	e := newEnv(t)
	in, err := e.c.Subjects().SessionInputs("s1")
	if err != nil {
		t.Fatal(err)
	}
	bad, _, err := e.c.Publish(e.ctx, streams.Publication{Subject: in, Data: []byte("unreadable input")})
	if err != nil {
		t.Fatal(err)
	}
	pos, err := e.log.Fence(e.ctx, "s1", 1, "w")
	if err != nil {
		t.Fatal(err)
	}
	cb, err := sessionlog.EncodeConsumeBody(&sessionlog.ConsumeBody{InputCursor: bad, Inputs: []sessionlog.InputUse{{Seq: bad, Refused: "not JSON"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.log.Consume(e.ctx, pos, "c1", cb); err != nil {
		t.Fatal(err)
	}
	check := func([]byte, bool) error { return errors.New("not an input") }
	fold := func(batch int) []projector.Poison {
		p, err := projector.Open(t.TempDir(), e.c, projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>", BatchSize: batch,
			Folds: []projector.Fold{projector.NewSessions("lash", projector.WithInputCheck(check))}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.CatchUp(e.ctx); err != nil {
			t.Fatal(err)
		}
		q, err := p.Quarantine()
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	one, many := fold(1), fold(1024)
	if len(one) != 1 || len(many) != 1 || string(one[0].Data) != "unreadable input" || string(many[0].Data) != string(one[0].Data) {
		t.Fatalf("quarantine folded a message a batch: %+v; all in one batch: %+v", one, many)
	}
}

// bigFold writes each message's payload and counts, at each batch's
// flush, the messages the batch held.
type bigFold struct{ batches *[]int }

func (bigFold) Name() string { return "big" }
func (f bigFold) Apply(tx *projector.Txn, m *streams.Msg) error {
	n, _ := tx.Memo("n")
	c, _ := n.(int)
	tx.SetMemo("n", c+1)
	return tx.Set(fmt.Appendf(nil, "%020d", m.Seq), m.Data)
}
func (f bigFold) Flush(tx *projector.Txn) error {
	n, _ := tx.Memo("n")
	c, _ := n.(int)
	*f.batches = append(*f.batches, c)
	tx.SetMemo("n", 0)
	return nil
}

// A batch is committed once it holds BatchBytes, however many messages
// are waiting: large records never make one batch of tens of MiB.
func TestBatchBytesBound(t *testing.T) {
	e := newEnv(t)
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 40, 100 << 10
	for i := range n {
		if _, err := js.Publish(e.ctx, fmt.Sprintf("lash.sess.big-%d.ev", i), bytes.Repeat([]byte{'x'}, size)); err != nil {
			t.Fatal(err)
		}
	}
	var batches []int
	p, err := projector.Open(t.TempDir(), e.c, projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>",
		Folds: []projector.Fold{bigFold{batches: &batches}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.CatchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	most, sum := projector.DefaultBatchBytes/size+1, 0
	for _, b := range batches {
		sum += b
		if b > most {
			t.Fatalf("a batch held %d messages of %d bytes, over %d bytes (batches %v)", b, size, projector.DefaultBatchBytes, batches)
		}
	}
	if sum != n {
		t.Fatalf("the batches held %d messages, %d were stored (batches %v)", sum, n, batches)
	}
}
