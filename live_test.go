package lash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
)

const paceScript = `
rule look
  when tools = 0
  say Let me look that up.
  call weather {"city":"Oslo"}

default
  say Oslo is cold today and colder tomorrow.
  pace 400ms
`

// watcher follows a session's live events from after, until stopped.
type watcher struct {
	mu      sync.Mutex
	records []live.Record
	cancel  context.CancelFunc
	done    chan error
}

func watch(t *testing.T, c *streams.Client, session string, after uint64) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- live.Follow(ctx, c, session, after, func(r live.Record) error {
			w.mu.Lock()
			w.records = append(w.records, r)
			w.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *watcher) stop() {
	w.cancel()
	<-w.done
	w.done <- nil // for a second stop
}

func (w *watcher) snapshot() []live.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]live.Record(nil), w.records...)
}

// waitFor waits until the watcher has seen n events of type typ.
func (w *watcher) waitFor(t *testing.T, typ string, n int) []live.Record {
	t.Helper()
	var got []live.Record
	testenv.WaitFor(t, 20*time.Second, func() error {
		got = w.snapshot()
		k := 0
		for _, r := range got {
			if r.Event.Type == typ {
				k++
			}
		}
		if k < n {
			return fmt.Errorf("%d %s events of %d seen", k, typ, n)
		}
		return nil
	})
	return got
}

// A model answer streams: its first piece is out before the model call
// ends (the call is not recorded yet while the server paces the rest), the
// pieces join into the answer, and every event is plain JSON with
// snake_case keys and words for roles and types.
func TestStreamedAnswer(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(paceScript))
	n := r.node("a")
	w := watch(t, n.Streams(), "s1", 0)
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Run(r.ctx); done <- err }()
	// The second model call's first piece: "Oslo ".
	var first live.Record
	testenv.WaitFor(t, 20*time.Second, func() error {
		for _, rec := range w.snapshot() {
			if rec.Event.Type == live.TypeTextDelta && rec.Event.Text == "Oslo " {
				first = rec
				return nil
			}
		}
		return errors.New("no delta of the second answer yet")
	})
	js, err := NewInspector(n.Streams()).Journal(r.ctx, "s1", first.Event.Turn)
	if err != nil {
		t.Fatal(err)
	}
	llm := 0
	for _, j := range js {
		if j.Kind == turn.KindLLMCall.String() {
			llm++
		}
	}
	if llm != 1 {
		t.Fatalf("the first piece of the second answer came after its call was recorded (%d model calls recorded)", llm)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recs := w.waitFor(t, live.TypeTurnCommitted, 1)
	deltas := map[uint64]string{}
	var types []string
	for _, rec := range recs {
		ev := rec.Event
		types = append(types, ev.Type)
		if ev.V != live.Version || ev.Session != "s1" || ev.Turn != "in-1" || ev.Node == "" || ev.At.IsZero() {
			t.Fatalf("event %+v", ev)
		}
		if ev.Type == live.TypeTextDelta {
			deltas[ev.Effect] += ev.Text
		}
	}
	if len(deltas) != 2 || deltas[first.Event.Effect] != "Oslo is cold today and colder tomorrow." {
		t.Fatalf("deltas by call: %v", deltas)
	}
	all := strings.Join(types, " ")
	for _, want := range []string{"run_started", "message", "tool_started", "tool_finished", "text_delta", "run_finished", "turn_committed"} {
		if !strings.Contains(all, want) {
			t.Fatalf("no %s event in %s", want, all)
		}
	}
	// On the wire: plain JSON, snake_case keys, roles and kinds as words.
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	raw := 0
	err = n.Streams().Tail(r.ctx, streams.Live, []string{"lash.live.s1"}, 1, func(m *streams.Msg, pending uint64) error {
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(m.Data))
		if err := dec.Decode(&obj); err != nil {
			return fmt.Errorf("event %d is not a JSON object: %v", m.Seq, err)
		}
		var check func(v any) error
		check = func(v any) error {
			switch v := v.(type) {
			case map[string]any:
				for k, x := range v {
					if !snake.MatchString(k) {
						return fmt.Errorf("key %q is not snake_case in %s", k, m.Data)
					}
					if err := check(x); err != nil {
						return err
					}
				}
			case []any:
				for _, x := range v {
					if err := check(x); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := check(obj); err != nil {
			return err
		}
		if msg, ok := obj["message"].(map[string]any); ok {
			if role, _ := msg["role"].(string); role != "user" && role != "assistant" && role != "tool" {
				return fmt.Errorf("role %v in %s", msg["role"], m.Data)
			}
		}
		if obj["type"] == live.TypeTurnCommitted && (obj["status"] != "done" || obj["termination"] != "natural-end") {
			return fmt.Errorf("commit event %s", m.Data)
		}
		raw++
		if pending == 0 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || raw != len(recs) {
		t.Fatalf("read %d raw events of %d: %v", raw, len(recs), err)
	}
}

// logBuffer collects a node's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A node that dies while the second answer streams leaves it unrecorded:
// the node that finishes the turn replays the first call, publishing none
// of its pieces again, and streams the second anew. Its log says it took
// the turn over and what it replayed and executed.
func TestCrashMidStreamRepublishesNoRecordedCall(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(paceScript))
	conn := r.conn()
	a := r.nodeOn(conn, "a")
	watching, err := streams.Bind(r.ctx, r.conn(), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := watch(t, watching, "s1", 0)
	if _, _, err := a.Session("s1").Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := a.Session("s1").Run(r.ctx); done <- err }()
	// Node a dies at the second answer's first piece.
	var firstCall uint64
	testenv.WaitFor(t, 20*time.Second, func() error {
		for _, rec := range w.snapshot() {
			if rec.Event.Type == live.TypeTextDelta && firstCall == 0 {
				firstCall = rec.Event.Effect
			}
			if rec.Event.Type == live.TypeTextDelta && rec.Event.Effect != firstCall {
				return nil
			}
		}
		return errors.New("the second answer has not begun")
	})
	conn.Close()
	if err := <-done; err == nil {
		t.Fatal("the run went on without its connection")
	}
	a.Close(context.Background())
	logs := &logBuffer{}
	b := r.node("b", WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	var res []TurnResult
	testenv.WaitFor(t, 20*time.Second, func() (err error) {
		res, err = b.Session("s1").Run(r.ctx) // busy until a's lease runs out
		return err
	})
	if len(res) != 1 || res[0].Replayed == 0 {
		t.Fatalf("b's run: %+v", res)
	}
	recs := w.waitFor(t, live.TypeTurnCommitted, 1)
	var first strings.Builder
	byNode := map[string]string{}
	for _, rec := range recs {
		if ev := rec.Event; ev.Type == live.TypeTextDelta {
			if ev.Effect == firstCall {
				first.WriteString(ev.Text)
			} else {
				byNode[ev.Node] += ev.Text
			}
		}
	}
	if first.String() != "Let me look that up." {
		t.Fatalf("the recorded call's pieces, all nodes: %q", first.String())
	}
	if got := byNode[b.runName]; got != "Oslo is cold today and colder tomorrow." {
		t.Fatalf("the second answer as b streamed it: %q (all: %q)", got, byNode)
	}
	out := logs.String()
	for _, want := range []string{
		`level=INFO msg="taking over a turn other runs began" session=s1 turn=in-1 attempt=2`,
		fmt.Sprintf(`level=INFO msg="turn committed" session=s1 turn=in-1 executed=%d replayed=%d`, res[0].Executed, res[0].Replayed),
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("b's log has no %q:\n%s", want, out)
		}
	}
}

// A watcher that goes away for several turns and comes back with the last
// sequence it saw reads every event it missed and then the new ones, each
// once, in order; one asking after a sequence the stream no longer keeps
// is told so.
func TestWatcherResumesFromCursor(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	s := n.Session("s1")
	all := watch(t, n.Streams(), "s1", 0)
	first := watch(t, n.Streams(), "s1", 0)
	turnOnce := func(i int) {
		t.Helper()
		if _, err := s.Turn(fmt.Sprintf("k%d", i), Input{Text: "Weather in Oslo, Lima and Pune?"}).Run(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	turnOnce(1)
	seen := first.waitFor(t, live.TypeTurnCommitted, 1)
	first.stop()
	cursor := seen[len(seen)-1].Seq
	for i := 2; i <= 4; i++ {
		turnOnce(i)
	}
	back := watch(t, n.Streams(), "s1", cursor)
	after := back.waitFor(t, live.TypeTurnCommitted, 3)
	turnOnce(5)
	after = back.waitFor(t, live.TypeTurnCommitted, 4)
	want := all.waitFor(t, live.TypeTurnCommitted, 5)
	var joined []uint64
	for _, rec := range append(seen, after...) {
		joined = append(joined, rec.Seq)
	}
	var full []uint64
	for _, rec := range want {
		full = append(full, rec.Seq)
	}
	if fmt.Sprint(joined) != fmt.Sprint(full) {
		t.Fatalf("before and after the gap:\n%v\nwant\n%v", joined, full)
	}
	err := live.Follow(r.ctx, n.Streams(), "s1", full[len(full)-1]+1000, func(live.Record) error { return nil })
	var behind *live.BehindError
	if !errors.As(err, &behind) {
		t.Fatalf("following after a sequence the stream never had: %v", err)
	}
}

// A node reports each model call it makes, with the model and its tokens,
// and each tool call it runs, with its status; a run that replays them
// reports none.
func TestObservedCalls(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var events []Event
	observe := WithObserver(func(ev Event) {
		if ev.Kind == EventModelCall || ev.Kind == EventToolCall || ev.Kind == EventTakeover {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	})
	n := r.node("a", observe, withBoundary(func(name string) error {
		if name == "before-commit" {
			return errCrash
		}
		return nil
	}))
	if _, _, err := n.Session("s1").Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Session("s1").Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run: %v", err)
	}
	mu.Lock()
	models, tools, in := 0, 0, int64(0)
	for _, ev := range events {
		switch ev.Kind {
		case EventModelCall:
			models++
			in += ev.Usage.InputTokens
			if ev.Model != "scripted" || ev.Code != "" {
				t.Errorf("model call %+v", ev)
			}
		case EventToolCall:
			tools++
			if ev.Tool != "weather" || ev.Code != "ok" {
				t.Errorf("tool call %+v", ev)
			}
		}
	}
	events = nil
	mu.Unlock()
	if models != r.models.Requests() || models != 2 || tools != 3 || in == 0 {
		t.Fatalf("%d model calls (%d requests, %d tokens in), %d tool calls", models, r.models.Requests(), in, tools)
	}
	b := r.node("b", observe)
	var res []TurnResult
	testenv.WaitFor(t, 20*time.Second, func() (err error) {
		res, err = b.Session("s1").Run(r.ctx)
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	if len(res) != 1 || res[0].Executed != 0 || len(events) != 1 || events[0].Kind != EventTakeover {
		t.Fatalf("the replaying run: %+v; events %+v", res, events)
	}
}
