package lash

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// seeds are the runs of TestSeededStoreFaults: LASH_SEED names one, else
// a few fixed ones run; LASH_CHAOS makes the runs longer (more sessions)
// and, without LASH_SEED, many more, from the clock.
func seeds(t *testing.T) (list []uint64, sessions int, reproduce string) {
	sessions, reproduce = 24, "LASH_SEED=%d go test -run TestSeededStoreFaults ."
	chaos := os.Getenv("LASH_CHAOS") != ""
	if chaos {
		sessions, reproduce = 48, "LASH_CHAOS=1 "+reproduce
	}
	switch s := os.Getenv("LASH_SEED"); {
	case s != "":
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LASH_SEED=%q: %v", s, err)
		}
		list = []uint64{seed}
	case chaos:
		base := uint64(time.Now().UnixNano())
		for i := range uint64(12) {
			list = append(list, base+i)
		}
	default:
		list = []uint64{1, 7, 42}
	}
	return list, sessions, reproduce
}

// Sessions driven through the real driver (three nodes serving) while
// every round trip to the store may fail before it is sent, lose its reply
// after it landed, wait, or go twice, and one node is cut off from the
// store for good at some point. The faults follow from the seed and each
// call's identity (node, op, subject, occurrence). With the faults off,
// every session finishes, and its history keeps the protocol's promises.
// The hand-named crash points (TestCrashAtEveryBoundary) stay as
// regression cases; this finds the points nobody named.
func TestSeededStoreFaults(t *testing.T) {
	list, sessions, reproduce := seeds(t)
	for _, seed := range list {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("reproduce with "+reproduce, seed)
				}
			})
			seededRun(t, newRig(t), seed, sessions)
		})
	}
}

// The same on a 3-node cluster with R3 streams, one seed: leader reads,
// replicated compare-and-sets and their in-flight codes under the faults.
func TestSeededStoreFaultsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster seeded run")
	}
	testenv.SkipClusterUnderRace(t)
	list, sessions, reproduce := seeds(t)
	seed := list[0]
	t.Logf("seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce with "+strings.Replace(reproduce, "TestSeededStoreFaults", "TestSeededStoreFaultsCluster", 1), seed)
		}
	})
	seededRun(t, newClusterRig(t), seed, sessions)
}

// faultRate is the share of calls that get a fault while faults are on.
const faultRate = 0.05

var (
	errDroppedCall = errors.New("seeded fault: request dropped")
	errLostReply   = errors.New("seeded fault: reply lost")
	errCutOff      = errors.New("seeded fault: cut off from the store")
)

// storeFaults is one node's interceptor.
type storeFaults struct {
	seed uint64
	node string
	// on: faults are on; calls counts the calls made meanwhile.
	on    atomic.Bool
	calls atomic.Int64
	// cutAt is the call from which on every call fails (0: never); that
	// call itself lands and loses its reply.
	cutAt int64
	cut   atomic.Bool

	mu    sync.Mutex
	seen  map[string]uint64
	kinds map[string]int
}

func newStoreFaults(seed uint64, node string, cutAt int64) *storeFaults {
	return &storeFaults{seed: seed, node: node, cutAt: cutAt, seen: map[string]uint64{}, kinds: map[string]int{}}
}

// fault picks the fault of a call from the seed and the call's identity,
// so the interleaving of other calls does not move it.
func (f *storeFaults) fault(c streams.Call) (string, time.Duration) {
	id := c.Op + " " + c.Subject
	f.mu.Lock()
	n := f.seen[id]
	f.seen[id]++
	f.mu.Unlock()
	h := fnv.New64a()
	fmt.Fprintf(h, "%s %s %d", f.node, id, n)
	rng := rand.New(rand.NewPCG(f.seed, h.Sum64()))
	if rng.Float64() >= faultRate {
		return "", 0
	}
	switch k := rng.IntN(10); {
	case k < 3:
		return "drop", 0
	case k < 6:
		return "lose", 0
	case k < 8:
		return "delay", time.Duration(1+rng.IntN(100)) * time.Millisecond
	default:
		return "twice", 0
	}
}

func (f *storeFaults) intercept(ctx context.Context, c streams.Call, do func(context.Context) error) error {
	if f.cut.Load() {
		return errCutOff
	}
	if !f.on.Load() {
		return do(ctx)
	}
	if f.cutAt > 0 && f.calls.Add(1) == f.cutAt {
		f.cut.Store(true)
		f.count("cut")
		_ = do(ctx)
		return errCutOff
	}
	kind, delay := f.fault(c)
	if kind == "" {
		return do(ctx)
	}
	f.count(kind)
	switch kind {
	case "drop":
		return errDroppedCall
	case "lose":
		if err := do(ctx); err != nil {
			return err
		}
		return errLostReply
	case "delay":
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		return do(ctx)
	}
	// Sent twice: the caller reads the answer to the second.
	_ = do(ctx)
	return do(ctx)
}

func (f *storeFaults) count(kind string) {
	f.mu.Lock()
	f.kinds[kind]++
	f.mu.Unlock()
}

// effects remembers when each model request (by its rendering, which
// names one call of one session) and each tool call (by its replay key)
// began.
type effects struct {
	mu    sync.Mutex
	model map[string][]time.Time
	tool  map[turn.ReplayKey][]time.Time
}

type effectModel struct {
	Model
	e *effects
}

func (m effectModel) Complete(ctx context.Context, req turn.ModelRequest, onDelta func(string)) (turn.ModelResponse, error) {
	key := (&renderer{}).request(&turn.LLMCall{Request: req})
	m.e.mu.Lock()
	m.e.model[key] = append(m.e.model[key], time.Now())
	m.e.mu.Unlock()
	return m.Model.Complete(ctx, req, onDelta)
}

func (e *effects) registry(t *testing.T) *tools.Registry {
	reg := tools.New()
	tool, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a weatherArgs) (string, error) {
		info, _ := tools.Info(ctx)
		e.mu.Lock()
		e.tool[info.Key] = append(e.tool[info.Key], time.Now())
		e.mu.Unlock()
		// Long enough for the run's lease to be renewed meanwhile.
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(400 * time.Millisecond):
		}
		return map[string]string{"Oslo": "2C snow", "Lima": "18C grey", "Pune": "33C sun"}[a.City], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	return reg
}

func seededRun(t *testing.T, r *rig, seed uint64, sessions int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	fx := &effects{model: map[string][]time.Time{}, tool: map[turn.ReplayKey][]time.Time{}}
	client, err := openai.New(openai.Config{BaseURL: r.models.URL(), Model: "scripted", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c"}
	faults := map[string]*storeFaults{}
	nodes := map[string]*Node{}
	for i, name := range names {
		var cutAt int64
		if i == len(names)-1 {
			cutAt = int64(20 + rng.IntN(120)) // the last node is cut off
		}
		faults[name] = newStoreFaults(seed, name, cutAt)
		f := faults[name]
		nodes[name] = r.node(name, WithStreams(streams.Config{Replicas: r.replicas, Intercept: f.intercept}),
			WithModel(effectModel{client, fx}), WithTools(fx.registry(t)), WithObserver(func(ev Event) {
				if ev.Kind == EventLeaseLost && !f.cut.Load() {
					f.count("lease lost")
				}
			}))
	}
	clean := r.node("check")
	for _, f := range faults {
		f.on.Store(true)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	var serving sync.WaitGroup
	for _, name := range names {
		serving.Go(func() { _ = nodes[name].Serve(ctx) })
	}
	// sent is closed once acked is complete, by the sender started below.
	sent, sending := make(chan struct{}), false
	defer func() {
		cancel()
		if sending {
			<-sent
		}
		serving.Wait()
	}()

	// The inputs go through a node with faults: each is sent again with
	// its key until one send is acknowledged.
	acked := make([][]uint64, sessions)
	send := func(i, j int) error {
		sid, key := fmt.Sprintf("s%d", i), fmt.Sprintf("k%d", j)
		in := Input{Text: fmt.Sprintf("%s asks %d: weather in Oslo, Lima and Pune?", sid, j)}
		var last error
		if !pollUntil(ctx, 20*time.Second, func() error {
			seq, _, err := nodes["a"].Session(sid).Send(r.ctx, key, in)
			if err == nil {
				acked[i] = append(acked[i], seq)
			}
			last = err
			return err
		}) {
			return fmt.Errorf("%s: input %d never acknowledged: %v", sid, j, last)
		}
		return nil
	}
	for i := range sessions {
		if err := send(i, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A second input for a third of the sessions while their first turns
	// run (injected at a checkpoint, or a turn of its own), and for
	// another third once their first is consumed (a turn of its own).
	order := rng.Perm(sessions)
	now, later := order[:sessions/3], order[sessions/3:2*sessions/3]
	for _, i := range now {
		if err := send(i, 1); err != nil {
			t.Fatal(err)
		}
	}
	sending = true
	go func() {
		defer close(sent)
		for _, i := range later {
			sid := fmt.Sprintf("s%d", i)
			if !pollUntil(ctx, 30*time.Second, func() error {
				st, err := clean.Session(sid).load(r.ctx)
				if err == nil && st.cursor < acked[i][0] {
					err = errors.New("not yet")
				}
				return err
			}) {
				t.Errorf("%s: the first input was not consumed in time", sid)
				return
			}
			if err := send(i, 1); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	done := func() error {
		select {
		case <-sent:
		default:
			return errors.New("inputs still being sent")
		}
		for i := range sessions {
			st, err := clean.Session(fmt.Sprintf("s%d", i)).load(r.ctx)
			if err != nil {
				return err
			}
			if last := slices.Max(acked[i]); st.cursor < last {
				return fmt.Errorf("session s%d consumed through %d of %d", i, st.cursor, last)
			}
		}
		return nil
	}
	// Faults while the sessions run, for a while; then none, and every
	// session finishes.
	_ = pollUntil(ctx, 15*time.Second, done)
	for _, f := range faults {
		f.on.Store(false)
	}
	testenv.WaitFor(t, 60*time.Second, done)
	// The cut node stopped by itself: its runs ended by their own clocks.
	cut := nodes[names[len(names)-1]]
	testenv.WaitFor(t, 10*time.Second, func() error {
		if n := cut.Running(); n > 0 {
			return fmt.Errorf("the cut node still runs %d sessions", n)
		}
		return nil
	})
	cancel()
	serving.Wait()

	var stats historyStats
	for i := range sessions {
		checkHistory(t, clean, fmt.Sprintf("s%d", i), acked[i], fx, &stats)
	}
	kinds := map[string]int{}
	for _, f := range faults {
		f.mu.Lock()
		for k, n := range f.kinds {
			kinds[k] += n
		}
		calls := 0
		for _, n := range f.seen {
			calls += int(n)
		}
		f.mu.Unlock()
		t.Logf("node %s: %d calls with faults on, cut at %d (%v)", f.node, calls, f.cutAt, f.cut.Load())
	}
	t.Logf("seed %d: %d sessions, %d turns (%d failed), %d takeovers; faults %v; tool calls run again in doubt %d, model calls made again before their record %d",
		seed, sessions, stats.turns, stats.failed, stats.takeovers, kinds, stats.toolAgain, stats.modelAgain)
}

// pollUntil is testenv.WaitFor that does not fail, for any goroutine: it
// says whether cond held before timeout, or ctx ended.
func pollUntil(ctx context.Context, timeout time.Duration, cond func() error) bool {
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if cond() == nil {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

type historyStats struct {
	turns, failed, takeovers int
	toolAgain, modelAgain    int
}

// checkHistory checks what the streams say of one session: one writer at a
// time, every acknowledged input consumed by exactly one commit, the
// transcript the commits' messages, no recorded model or tool call made
// again, and verify's replay agreeing with every turn.
func checkHistory(t *testing.T, n *Node, sid string, acked []uint64, fx *effects, stats *historyStats) {
	t.Helper()
	ctx := context.Background()
	var token uint64
	fences := map[uint64]int{} // fences since the last commit, by token
	consumed := map[uint64]string{}
	var turns []string
	var messages []turn.Message
	_, _, err := n.log.ReadEntries(ctx, sid, 0, func(seq uint64, e *sessionlog.Entry) error {
		switch e.Kind {
		case sessionlog.KindFence:
			if e.Token < token {
				t.Errorf("%s: fence %d at %d after fence %d", sid, e.Token, seq, token)
			}
			token = e.Token
			fences[e.Token]++
			return nil
		case sessionlog.KindCommit, sessionlog.KindConsume:
		default:
			return nil
		}
		if e.Token != token {
			t.Errorf("%s: %s of %s at %d under token %d after fence %d", sid, e.Kind, e.Turn, seq, e.Token, token)
		}
		if len(fences) > 1 {
			stats.takeovers++
		}
		clear(fences)
		data, err := n.log.Body(ctx, sid, e)
		if err != nil {
			return err
		}
		var uses []sessionlog.InputUse
		if e.Kind == sessionlog.KindConsume {
			b, err := sessionlog.DecodeConsumeBody(data)
			if err != nil {
				return err
			}
			uses = b.Inputs
		} else {
			b, err := sessionlog.DecodeTurnBody(data)
			if err != nil {
				return err
			}
			if slices.Contains(turns, e.Turn) {
				t.Errorf("%s: turn %s committed twice", sid, e.Turn)
			}
			turns = append(turns, e.Turn)
			messages = append(messages, b.Outcome.Messages...)
			uses = b.Inputs
			if failedTurn(&b.Outcome) {
				stats.failed++
				t.Errorf("%s: turn %s committed as failed: %s", sid, e.Turn, b.Outcome.Termination.String())
			}
		}
		for _, u := range uses {
			if u.Refused != "" || u.Duplicate != 0 {
				t.Errorf("%s: input %d consumed without a turn by %s: %+v", sid, u.Seq, e.Turn, u)
				continue
			}
			if by, ok := consumed[u.Seq]; ok {
				t.Errorf("%s: input %d consumed by %s and by %s", sid, u.Seq, by, e.Turn)
			}
			consumed[u.Seq] = e.Turn
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: reading the log: %v", sid, err)
	}
	stats.turns += len(turns)
	for _, seq := range acked {
		if _, ok := consumed[seq]; !ok {
			t.Errorf("%s: acknowledged input %d consumed by no turn", sid, seq)
		}
	}
	if len(consumed) != len(acked) {
		t.Errorf("%s: %d inputs consumed, %d acknowledged", sid, len(consumed), len(acked))
	}
	// The transcript, read through the snapshots, is the commits' messages;
	// each input's text is in it once.
	tr, err := n.Session(sid).Transcript(ctx)
	if err != nil {
		t.Fatalf("%s: transcript: %v", sid, err)
	}
	if got, want := describeTranscript(tr), describeTranscript(messages); got != want {
		t.Errorf("%s: transcript:\n%s\ncommits:\n%s", sid, got, want)
	}
	for j := range len(acked) {
		text, seen := fmt.Sprintf("%s asks %d: weather in Oslo, Lima and Pune?", sid, j), 0
		for _, m := range tr {
			if m.Role == turn.RoleUser && m.Text == text {
				seen++
			}
		}
		if seen != 1 {
			t.Errorf("%s: input %q is in the transcript %d times", sid, text, seen)
		}
	}
	rep, err := NewInspector(n.Streams()).VerifyRecorded(ctx, turn.Hooks{}, sid, "")
	if err != nil || !rep.OK() {
		t.Errorf("%s: verify: %+v, %v", sid, rep, err)
	}
	for _, id := range turns {
		checkJournal(t, n, sid, id, fx, stats)
	}
}

// checkJournal checks that no recorded model or tool call of a turn was
// made after its record: a call made more than once was made again only
// while no record of it stood.
func checkJournal(t *testing.T, n *Node, sid, id string, fx *effects, stats *historyStats) {
	t.Helper()
	recs, err := n.journal.Load(context.Background(), sid, id)
	if err != nil {
		t.Fatalf("%s %s: journal: %v", sid, id, err)
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	for _, rec := range recs {
		var made []time.Time
		var what string
		switch rec.Key.Kind {
		case turn.KindToolCall:
			made, what = fx.tool[rec.Key], "tool call"
			if len(made) > 1 {
				stats.toolAgain += len(made) - 1
			}
		case turn.KindLLMCall:
			a, err := decodeAnswer(rec.Outcome.Data)
			if err != nil || a.Request == "" {
				t.Errorf("%s: the record of %s keeps no request: %v", sid, rec.Key, err)
				continue
			}
			made, what = fx.model[a.Request], "model call"
			if len(made) > 1 {
				stats.modelAgain += len(made) - 1
			}
		default:
			continue
		}
		if len(made) == 0 {
			t.Errorf("%s: %s %s is recorded (by %s) but was never made", sid, what, rec.Key, rec.Recorder)
		}
		for _, at := range made {
			if at.After(rec.At) {
				t.Errorf("%s: %s %s made at %s, after its record by %s at %s", sid, what, rec.Key,
					at.Format("15:04:05.000"), rec.Recorder, rec.At.Format("15:04:05.000"))
			}
		}
	}
}
