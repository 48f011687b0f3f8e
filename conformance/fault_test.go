package conformance_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sizes of TestClusterServerStopDuringWrites.
const (
	faultWriters = 4
	// faultTurns per writer: each turn is one journal record and one
	// commit, so 4 writers write 1,000 acknowledged writes.
	faultTurns = 125
	// faultStopAt and faultRestartAt are how many writes must be
	// acknowledged before the stream leader is stopped and restarted.
	faultStopAt    = 150
	faultRestartAt = 550
	// attemptTimeout bounds one attempt of a write; a leader election
	// takes a few seconds, during which attempts time out and are retried.
	attemptTimeout = 2 * time.Second
	// writeDeadline bounds all attempts of one write.
	writeDeadline = 40 * time.Second
)

// ack is one acknowledged write.
type ack struct {
	writer int
	turn   string
	seq    uint64 // commit: the log revision; record: the record's sequence
}

// faultWriter is one session's writer: it holds the session's lease, has
// fenced, and then runs turns, each recording one effect and committing.
type faultWriter struct {
	id      int
	session string
	token   uint64
	head    sessionlog.Position
	log     *sessionlog.Log
	journal *effectlog.Journal

	commits, records []ack
	attempts         int
	transient        map[string]int // error text (shortened) -> count
	// holds: the writer whose write is the n-th acknowledged waits on
	// holds[n] before going on, so the fault comes while writes remain
	// however fast the others are.
	holds map[int64]chan struct{}
}

func (w *faultWriter) ack(ctx context.Context, acked *atomic.Int64) {
	if hold, ok := w.holds[acked.Add(1)]; ok {
		select {
		case <-hold:
		case <-ctx.Done():
		}
	}
}

func faultKey(session, turnID string) turn.ReplayKey {
	return turn.ReplayKey{Session: session, Turn: turnID, Iteration: 1, Kind: turn.KindLLMCall, Effect: 1}
}

func faultHash(key turn.ReplayKey) turn.Hash { return sha256.Sum256([]byte("request " + key.String())) }

func faultOutcome(key turn.ReplayKey) effectlog.Outcome {
	return effectlog.Outcome{Data: []byte("outcome " + key.String())}
}

func faultBody(session, turnID string) []byte { return []byte("commit " + session + "/" + turnID) }

// permanent reports errors a retry cannot fix: they are answers, and in
// this test every one of them is a failure.
func permanent(err error) bool {
	for _, target := range []error{streams.ErrConflict, sessionlog.ErrFenced, sessionlog.ErrCommitConflict,
		sessionlog.ErrMalformed, sessionlog.ErrInvalid, effectlog.ErrNondeterminism, effectlog.ErrMalformed,
		effectlog.ErrInvalid, streams.ErrTooLarge, context.Canceled} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// retry runs op until it succeeds, a permanent error, or writeDeadline.
// Every other error (timeouts, no responders, leader elections, "message
// id in process") is transient: op is retried unchanged, with the same
// stamp, msg id and expected revision.
func (w *faultWriter) retry(ctx context.Context, what string, op func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, writeDeadline)
	defer cancel()
	for attempt := 1; ; attempt++ {
		w.attempts++
		actx, acancel := context.WithTimeout(ctx, attemptTimeout)
		err := op(actx)
		acancel()
		if err == nil {
			return nil
		}
		if permanent(err) || ctx.Err() != nil {
			return fmt.Errorf("writer %d: %s, attempt %d: %w", w.id, what, attempt, err)
		}
		w.transient[shorten(err)]++
		// A short pause between attempts, not a wait for a condition:
		// the next attempt is the check.
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// shorten keeps the kind of an error, dropping subjects and numbers that
// differ between occurrences.
func shorten(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && !strings.Contains(s[i:], "code=") {
		s = s[i+2:]
	}
	if i := strings.Index(s, "description="); i >= 0 {
		s = s[i:]
	}
	return s
}

// diagnose adds to a commit's permanent conflict whether the commit had in
// fact landed: then the conflict was this writer's own earlier attempt.
func (w *faultWriter) diagnose(ctx context.Context, turnID string, err error) error {
	if !errors.Is(err, streams.ErrConflict) {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		seq, _, ferr := w.log.FindCommit(ctx, w.session, turnID, w.head.Seq()+1)
		if ferr == nil {
			return fmt.Errorf("%w; BUG: the commit had landed at %d: a retry of a write still in flight on a replicated "+
				"stream got error 10164 and streams.Append reported it as a conflict, because the message after the "+
				"expected head was not readable yet", err, seq)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}

func (w *faultWriter) run(ctx context.Context, acked *atomic.Int64) error {
	for i := range faultTurns {
		// The same turn ids in every session: msg ids are scoped per
		// session, which the test shows along the way.
		turnID := fmt.Sprintf("turn-%03d", i)
		key := faultKey(w.session, turnID)
		var rec *effectlog.Record
		var won bool
		err := w.retry(ctx, "record "+key.String(), func(ctx context.Context) error {
			var err error
			rec, won, err = w.journal.Record(ctx, key, faultHash(key), faultOutcome(key))
			return err
		})
		if err != nil {
			return err
		}
		// One writer per key: the standing record is this writer's, and
		// a retry of a write that landed must say so.
		if !won || rec.Recorder != fmt.Sprintf("writer-%d", w.id) || string(rec.Outcome.Data) != string(faultOutcome(key).Data) {
			return fmt.Errorf("writer %d: record %s: got %+v won=%v; want this writer's record, won", w.id, key, rec, won)
		}
		w.records = append(w.records, ack{w.id, turnID, rec.Seq})
		w.ack(ctx, acked)

		var next sessionlog.Position
		err = w.retry(ctx, "commit "+turnID, func(ctx context.Context) error {
			var err error
			next, err = w.log.Commit(ctx, w.head, turnID, faultBody(w.session, turnID))
			return err
		})
		if err != nil {
			return w.diagnose(ctx, turnID, err)
		}
		if next.Seq() <= w.head.Seq() {
			return fmt.Errorf("writer %d: commit %s at %d returned %d", w.id, turnID, w.head.Seq(), next.Seq())
		}
		w.commits = append(w.commits, ack{w.id, turnID, next.Seq()})
		w.head = next
		w.ack(ctx, acked)
	}
	return nil
}

// TestClusterServerStopDuringWrites stops the sessions stream's leader while
// four writers commit turns and journal effects on an R3 deployment, and
// restarts it later. Writers retry transient errors with the same stamps.
// Afterwards every acknowledged write is stored exactly once, on every
// server.
func TestClusterServerStopDuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster with a failover in -short mode")
	}
	testenv.SkipClusterUnderRace(t)
	start := time.Now()
	c := testenv.RunCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cfg := streams.Config{Prefix: "fault", Replicas: 3}
	admin, err := streams.Open(ctx, c.Conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}

	// Each writer: its own connection (to a random server), its own
	// session, lease and fence.
	writers := make([]*faultWriter, faultWriters)
	for i := range writers {
		cl, err := streams.Open(ctx, c.Conn(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		w := &faultWriter{id: i, session: fmt.Sprintf("session-%d", i), log: sessionlog.New(cl),
			journal: effectlog.New(cl, effectlog.WithRecorder(fmt.Sprintf("writer-%d", i))), transient: map[string]int{}}
		key, err := leases.Key("sess", w.session)
		if err != nil {
			t.Fatal(err)
		}
		l, err := leases.New(cl, leases.LocalOwner(fmt.Sprintf("writer-%d", i))).Claim(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		w.token = l.Token
		if w.head, err = w.log.Fence(ctx, w.session, w.token, fmt.Sprintf("writer-%d", i)); err != nil {
			t.Fatal(err)
		}
		writers[i] = w
	}
	stopHold, restartHold := make(chan struct{}), make(chan struct{})
	for _, w := range writers {
		w.holds = map[int64]chan struct{}{faultStopAt: stopHold, faultRestartAt: restartHold}
	}

	// The victim: the server leading the sessions stream.
	sessions := admin.StreamName(streams.Sessions)
	victim, leader := streamLeader(t, ctx, c, admin, sessions)
	t.Logf("stopping %s, leader of %s", leader, sessions)

	var acked atomic.Int64
	errs := make([]error, faultWriters)
	var wg sync.WaitGroup
	wctx, wcancel := context.WithCancel(ctx)
	t.Cleanup(func() { wcancel(); wg.Wait() }) // before the connections close
	writeStart := time.Now()
	for i, w := range writers {
		wg.Go(func() { errs[i] = w.run(wctx, &acked) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	total := int64(faultWriters * faultTurns * 2)
	progress := func(n int64) func() error {
		return func() error {
			select {
			case <-done:
				return nil // finished (or failed): nothing more to wait for
			default:
			}
			if got := acked.Load(); got < n {
				return fmt.Errorf("%d of %d writes acknowledged, waiting for %d", got, total, n)
			}
			return nil
		}
	}

	testenv.WaitFor(t, 30*time.Second, progress(faultStopAt))
	atStop := acked.Load()
	stopT := time.Now()
	c.StopServer(victim)
	close(stopHold)
	atStopped := acked.Load()
	t.Logf("%s stopped in %v with %d writes acknowledged (%d when the stop began)",
		leader, time.Since(stopT).Round(time.Millisecond), atStopped, atStop)

	testenv.WaitFor(t, 45*time.Second, progress(faultRestartAt))
	atRestart := acked.Load()
	outage := time.Since(stopT)
	restartT := time.Now()
	c.RestartServer(victim)
	close(restartHold)
	t.Logf("%s restarted after an outage of %v, with %d writes acknowledged; whole and current again in %v",
		leader, outage.Round(time.Millisecond), atRestart, time.Since(restartT).Round(time.Millisecond))

	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("writers did not finish: %d of %d writes acknowledged", acked.Load(), total)
	}
	t.Logf("writers finished in %v", time.Since(writeStart).Round(time.Millisecond))
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if got := acked.Load(); got != total {
		t.Fatalf("%d writes acknowledged, want %d", got, total)
	}
	if atStopped >= total || atRestart >= total {
		t.Fatalf("the writers were done before the fault (%d acknowledged at the stop, %d at the restart): the test tested nothing",
			atStopped, atRestart)
	}
	attempts := 0
	transient := map[string]int{}
	for _, w := range writers {
		attempts += w.attempts
		for k, v := range w.transient {
			transient[k] += v
		}
	}
	t.Logf("%d attempts for %d writes; transient errors retried: %v", attempts, total, transient)

	// Every server, the restarted one included, holds exactly the
	// acknowledged writes: 4 fences and 500 commits, 500 records.
	effects := admin.StreamName(streams.Effects)
	want := map[string]uint64{sessions: faultWriters * (1 + faultTurns), effects: faultWriters * faultTurns}
	testenv.WaitFor(t, 30*time.Second, func() error { return serversHold(c, want) })

	// Read everything back through a new connection to any server.
	check, err := streams.Open(ctx, c.Conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	verifyFault(t, ctx, check, writers)
	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}

// streamLeader returns the index and name of the server leading stream.
func streamLeader(t *testing.T, ctx context.Context, c *testenv.Cluster, cl *streams.Client, stream string) (int, string) {
	t.Helper()
	js, err := jetstream.New(cl.Conn())
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	testenv.WaitFor(t, 10*time.Second, func() error {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("stream %s has no leader", stream)
		}
		leader = info.Cluster.Leader
		return nil
	})
	for i, s := range c.Servers() {
		if s.Name() == leader {
			return i, leader
		}
	}
	t.Fatalf("stream %s is led by %q, which is not a server of the cluster", stream, leader)
	return 0, ""
}

// serversHold reports the first server whose replica of a stream in want
// does not hold exactly the wanted number of messages, ending at the same
// last sequence as the others.
func serversHold(c *testenv.Cluster, want map[string]uint64) error {
	last := map[string]uint64{}
	for _, s := range c.Servers() {
		ns := s.NATS()
		if ns == nil {
			return fmt.Errorf("%s is not running", s.Name())
		}
		jsz, err := ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		seen := map[string]bool{}
		for _, acc := range jsz.AccountDetails {
			for _, st := range acc.Streams {
				n, ok := want[st.Name]
				if !ok {
					continue
				}
				seen[st.Name] = true
				if st.State.Msgs != n {
					return fmt.Errorf("%s holds %d messages in %s, want %d", s.Name(), st.State.Msgs, st.Name, n)
				}
				if l, ok := last[st.Name]; ok && l != st.State.LastSeq {
					return fmt.Errorf("%s ends %s at %d, another server at %d", s.Name(), st.Name, st.State.LastSeq, l)
				}
				last[st.Name] = st.State.LastSeq
				if !ns.JetStreamIsStreamCurrent(acc.Id, st.Name) {
					return fmt.Errorf("%s: %s not current", s.Name(), st.Name)
				}
			}
		}
		for name := range want {
			if !seen[name] {
				return fmt.Errorf("%s has no replica of %s", s.Name(), name)
			}
		}
	}
	return nil
}

// verifyFault reads every session log and the whole journal back and
// checks each acknowledged write is there exactly once, where it was
// acknowledged, and that nothing else is.
func verifyFault(t *testing.T, ctx context.Context, cl *streams.Client, writers []*faultWriter) {
	t.Helper()
	lg := sessionlog.New(cl)
	j := effectlog.New(cl)
	for _, w := range writers {
		if len(w.commits) != faultTurns || len(w.records) != faultTurns {
			t.Fatalf("writer %d acknowledged %d commits and %d records, want %d each", w.id, len(w.commits), len(w.records), faultTurns)
		}
		var seen map[string]uint64
		var fences, order []string
		err := retryNoResponders(t, func() error {
			seen, fences, order = map[string]uint64{}, nil, nil
			return lg.Read(ctx, w.session, 0, func(seq uint64, e *sessionlog.Entry) error {
				switch e.Kind {
				case sessionlog.KindFence:
					fences = append(fences, fmt.Sprintf("%d@%d", e.Token, seq))
				case sessionlog.KindCommit:
					if prev, dup := seen[e.Turn]; dup {
						return fmt.Errorf("turn %s committed twice, at %d and %d", e.Turn, prev, seq)
					}
					if e.Token != w.token || string(e.Body) != string(faultBody(w.session, e.Turn)) {
						return fmt.Errorf("commit of %s at %d: token %d body %q", e.Turn, seq, e.Token, e.Body)
					}
					seen[e.Turn] = seq
					order = append(order, e.Turn)
				}
				return nil
			})
		})
		if err != nil {
			t.Fatalf("session %s: %v", w.session, err)
		}
		if len(fences) != 1 {
			t.Errorf("session %s has fences %v, want one", w.session, fences)
		}
		if len(seen) != len(w.commits) {
			t.Errorf("session %s holds %d commits, %d were acknowledged", w.session, len(seen), len(w.commits))
		}
		for _, a := range w.commits {
			if seq, ok := seen[a.turn]; !ok || seq != a.seq {
				t.Errorf("session %s: commit of %s acknowledged at %d, stored at %d (present %v)", w.session, a.turn, a.seq, seq, ok)
			}
		}
		if !sort.StringsAreSorted(order) {
			t.Errorf("session %s: commits out of order: %v", w.session, order)
		}
		for _, a := range w.records {
			key := faultKey(w.session, a.turn)
			rec, err := j.Lookup(ctx, key, faultHash(key))
			if err != nil || rec.Seq != a.seq || string(rec.Outcome.Data) != string(faultOutcome(key).Data) {
				t.Errorf("record %s acknowledged at %d: Lookup = %+v, %v", key, a.seq, rec, err)
			}
		}
	}
	// The whole journal: one message per record subject, and only
	// acknowledged ones.
	acked := map[uint64]bool{}
	for _, w := range writers {
		for _, a := range w.records {
			acked[a.seq] = true
		}
	}
	var perSubject map[string]int
	var stray []uint64
	err := retryNoResponders(t, func() error {
		perSubject, stray = map[string]int{}, nil
		return cl.Read(ctx, cl.Config().Prefix+".fx.>", 0, func(m *streams.Msg) error {
			perSubject[m.Subject]++
			if !acked[m.Seq] {
				stray = append(stray, m.Seq)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(perSubject) != len(acked) || len(stray) != 0 {
		t.Errorf("journal holds %d subjects and unacknowledged records at %v; %d records were acknowledged", len(perSubject), stray, len(acked))
	}
	var twice []string
	for s, n := range perSubject {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s×%d", s, n))
		}
	}
	slices.Sort(twice)
	if len(twice) > 0 {
		t.Errorf("journal subjects with more than one record: %v", twice)
	}
}

// retryNoResponders retries a read that failed with "no responders", which
// streams.Read returns now and then on a cluster (the conformance subtest
// streams/read-reliable asserts it does not).
func retryNoResponders(t *testing.T, read func() error) error {
	for attempt := 1; ; attempt++ {
		err := read()
		if !errors.Is(err, nats.ErrNoResponders) || attempt == 5 {
			return err
		}
		t.Logf("read: %v (attempt %d; known streams.Read flake, retried)", err, attempt)
	}
}
