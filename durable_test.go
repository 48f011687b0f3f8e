package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

const eventScript = `
rule quick
  when user contains hurry
  when tools = 0
  call pay {"timeout_s": 1}

rule pay
  when user contains pay
  when tools = 0
  call pay {}

rule charge
  when user contains charge
  when tools = 0
  call charge {}

default
  say done waiting
`

var testSecret = []byte("0123456789abcdef0123456789abcdef-test")

// eventTools: "pay" waits for the event "approval" of its call and says
// how it ended; "charge" runs a durable step that appends to a file, then
// calls after (which may kill the process).
func eventTools(t testing.TB, charges string, after func()) *tools.Registry {
	reg := tools.New()
	pay, err := tools.Func("pay", "pay once approved", func(ctx context.Context, a struct {
		TimeoutS int `json:"timeout_s,omitempty"`
	}) (string, error) {
		v, err := tools.AwaitEvent(ctx, "approval", time.Duration(a.TimeoutS)*time.Second)
		switch {
		case tools.IsPending(err):
			return "", err
		case errors.Is(err, tools.ErrEventTimeout):
			return "timed out", nil
		case errors.Is(err, tools.ErrEventCancelled):
			return "cancelled", nil
		case errors.Is(err, tools.ErrEventRevoked):
			return "revoked", nil
		case err != nil:
			return "", err
		}
		return "approved " + string(v), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	charge, err := tools.Func("charge", "charge a card once", func(ctx context.Context, _ struct{}) (string, error) {
		n, err := tools.Step(ctx, "charge", func(ctx context.Context) (int, error) {
			f, err := os.OpenFile(charges, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return 0, err
			}
			defer f.Close()
			fmt.Fprintln(f, "charged")
			return 42, nil
		})
		if err != nil {
			return "", err
		}
		if after != nil {
			after()
		}
		return fmt.Sprintf("charged %d", n), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []tools.Tool{pay, charge} {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// eventNode serves and wakes with the event tools.
func eventNode(t *testing.T, r *rig, id string, extra ...Option) *Node {
	t.Helper()
	opts := append([]Option{WithTools(eventTools(t, filepath.Join(t.TempDir(), "charges"), nil)), WithProjection(t.TempDir()), WithSecret(testSecret)}, extra...)
	n := r.node(id, opts...)
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 2)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return n
}

func eventRig(t *testing.T) *rig {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(eventScript))
	return r
}

// keyOf mints the key the "pay" call of a session's first turn waits with
// (the scripted model's first call id is call_1).
func keyOf(t *testing.T, n *Node, session string) (id, key string) {
	t.Helper()
	id = eventID(session, "call_1", "approval")
	mac, err := n.mac("key", id)
	if err != nil {
		t.Fatal(err)
	}
	return id, id + "." + mac
}

// resolveEvent publishes a resolution as an outsider would.
func resolveEvent(t *testing.T, nc *nats.Conn, id, key, value string) {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q,"value":%s}`, key, value)
	if _, err := nc.Request("lash.signal.event."+id, []byte(body), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func parkedOn(t *testing.T, n *Node, session string) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ts := turnsOf(t, n, session); len(ts) != 1 || ts[0].Suspended != 1 {
			return fmt.Errorf("turns %+v", ts)
		}
		return nil
	})
}

// A resolution wakes the call, which runs again and gets the value; a
// second resolution is refused and changes nothing.
func TestAwaitEventResolved(t *testing.T) {
	r := eventRig(t)
	n := eventNode(t, r, "a")
	s := n.Session("buyer")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "pay"}); err != nil {
		t.Fatal(err)
	}
	parkedOn(t, n, "buyer")
	id, key := keyOf(t, n, "buyer")
	nc := r.conn()
	resolveEvent(t, nc, id, key, `{"by":"alice"}`)
	if got := lastAnswer(t, s); got.Text != `approved {"by":"alice"}` {
		t.Fatalf("the call's result %q", got.Text)
	}
	resolveEvent(t, nc, id, key, `{"by":"mallory"}`)
	timersSettled(t, n)
	signalsSettled(t, n)
	if rec, err := n.resolutionOf(r.ctx, id); err != nil || string(rec.Value) != `{"by":"alice"}` {
		t.Fatalf("resolution %+v, %v; want the first", rec, err)
	}
	if ts := turnsOf(t, n, "buyer"); len(ts) != 2 {
		t.Fatalf("turns %+v; want the parking one and the one that went on", ts)
	}
}

// A resolution published before anything waits is kept: the call finds
// it and never parks.
func TestAwaitEventEarly(t *testing.T) {
	r := eventRig(t)
	n := eventNode(t, r, "a")
	id, key := keyOf(t, n, "early")
	resolveEvent(t, r.conn(), id, key, `"yes"`)
	testenv.WaitFor(t, 20*time.Second, func() error {
		_, err := n.resolutionOf(r.ctx, id)
		return err
	})
	s := n.Session("early")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "pay"}); err != nil {
		t.Fatal(err)
	}
	if got := lastAnswer(t, s); got.Text != `approved "yes"` {
		t.Fatalf("the call's result %q", got.Text)
	}
	if ts := turnsOf(t, n, "early"); len(ts) != 1 || ts[0].Suspended != 0 {
		t.Fatalf("turns %+v; want one that never parked", ts)
	}
}

// A wait with a timeout ends with the timeout when nothing resolves it.
func TestAwaitEventTimeout(t *testing.T) {
	r := eventRig(t)
	n := eventNode(t, r, "a")
	s := n.Session("slow")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "hurry"}); err != nil {
		t.Fatal(err)
	}
	if got := lastAnswer(t, s); got.Text != "timed out" {
		t.Fatalf("the call's result %q", got.Text)
	}
	id, key := keyOf(t, n, "slow")
	resolveEvent(t, r.conn(), id, key, `"late"`)
	signalsSettled(t, n)
	if rec, err := n.resolutionOf(r.ctx, id); err != nil || rec.Kind != timedOutEvent {
		t.Fatalf("resolution %+v, %v; want the timeout to stand", rec, err)
	}
}

// An operator's cancel and revoke end waits with results of their own;
// a revoked key takes no resolution after.
func TestAwaitEventCancelAndRevoke(t *testing.T) {
	r := eventRig(t)
	n := eventNode(t, r, "a")
	for _, c := range []struct {
		session string
		revoke  bool
		want    string
	}{{"c1", false, "cancelled"}, {"c2", true, "revoked"}} {
		s := n.Session(c.session)
		if _, _, err := s.Send(r.ctx, "k1", Input{Text: "pay"}); err != nil {
			t.Fatal(err)
		}
		parkedOn(t, n, c.session)
		id, key := keyOf(t, n, c.session)
		if first, err := EndEvent(r.ctx, n.Streams(), id, c.revoke, "operator"); err != nil || !first {
			t.Fatalf("EndEvent: %v %v", first, err)
		}
		if got := lastAnswer(t, s); got.Text != c.want {
			t.Fatalf("%s: the call's result %q", c.session, got.Text)
		}
		resolveEvent(t, r.conn(), id, key, `"too late"`)
		signalsSettled(t, n)
		if rec, err := n.resolutionOf(r.ctx, id); err != nil || rec.Kind != c.want {
			t.Fatalf("resolution %+v, %v; want %s to stand", rec, err, c.want)
		}
	}
}

// A tampered or foreign key resolves nothing, and the answer does not say
// whether the event exists.
func TestAwaitEventTamperedKey(t *testing.T) {
	r := eventRig(t)
	n := eventNode(t, r, "a")
	s := n.Session("t1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "pay"}); err != nil {
		t.Fatal(err)
	}
	parkedOn(t, n, "t1")
	id, key := keyOf(t, n, "t1")
	nc := r.conn()
	tampered := key[:len(key)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(key, "AA")]
	resolveEvent(t, nc, id, tampered, `"forged"`)
	other, _ := keyOf(t, n, "nobody")
	resolveEvent(t, nc, id, other, `"forged"`)                                  // another event's valid key
	resolveEvent(t, nc, "ev-00000000000000000000000000000000", key, `"forged"`) // a valid key on another id
	resolveEvent(t, nc, id, "ev-x.Zm9yZ2Vk", `"forged"`)                        // not even the id
	signalsSettled(t, n)
	if _, err := n.resolutionOf(r.ctx, id); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("a forged key resolved the event: %v", err)
	}
	if ts := turnsOf(t, n, "t1"); len(ts) != 1 || ts[0].Suspended != 1 {
		t.Fatalf("turns %+v; want the call still parked", ts)
	}
}

// A resolution published between the tool's request and the commit that
// parks the call is not lost.
func TestAwaitEventBeforeCommit(t *testing.T) {
	r := eventRig(t)
	var n *Node
	nc := r.conn()
	n = eventNode(t, r, "a", withBoundary(func(name string) error {
		if name != "before-commit" || n == nil {
			return nil
		}
		id, key := keyOf(t, n, "racy")
		if _, err := n.resolutionOf(context.Background(), id); err == nil {
			return nil
		}
		resolveEvent(t, nc, id, key, `"in between"`)
		testenv.WaitFor(t, 20*time.Second, func() error { _, err := n.resolutionOf(context.Background(), id); return err })
		return nil
	}))
	s := n.Session("racy")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "pay"}); err != nil {
		t.Fatal(err)
	}
	if got := lastAnswer(t, s); got.Text != `approved "in between"` {
		t.Fatalf("the call's result %q", got.Text)
	}
}

// signalsSettled waits until the nodes' signal consumer has handled every
// signal stored.
func signalsSettled(t *testing.T, n *Node) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, func() error {
		m, err := n.Streams().Conn().Request("$JS.API.CONSUMER.INFO."+n.Streams().StreamName(streams.Triggers)+"."+signalConsumer, nil, time.Second)
		if err != nil {
			return err
		}
		var info struct {
			NumPending    uint64 `json:"num_pending"`
			NumAckPending uint64 `json:"num_ack_pending"`
		}
		if err := json.Unmarshal(m.Data, &info); err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("signals: %d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
		}
		return nil
	})
}

// TestStepThenDie runs a turn whose tool records a durable step and is
// killed (SIGKILL) right after, when the test binary runs itself as a
// separate process; otherwise it does nothing.
func TestStepThenDie(t *testing.T) {
	if os.Getenv("LASH_TEST_STEP_THEN_DIE") == "" {
		t.Skip("runs only as the dying node of TestDurableStepAcrossSIGKILL")
	}
	r := childRig(t, eventScript)
	die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	n := r.node("dying", WithTools(eventTools(t, os.Getenv("LASH_TEST_CHARGES"), die)), WithSecret(testSecret))
	n.Session("card").Run(r.ctx) // killed inside the tool
}

// A tool's durable step runs once across a SIGKILL of its node after the
// step was recorded: the node that finishes the turn runs the tool again
// (in doubt), and the step answers from the journal.
func TestDurableStepAcrossSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	srv := testenv.RunJetStream(t)
	r := &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return srv.Conn(t) }, replicas: 1,
		models: testenv.RunModelServer(t, scripted.MustParse(eventScript)), runs: &counter{runs: map[string]int{}}}
	charges := filepath.Join(t.TempDir(), "charges")
	admin := r.node("admin")
	if _, _, err := admin.Session("card").Send(r.ctx, "k1", Input{Text: "charge"}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStepThenDie$")
	cmd.Env = append(os.Environ(), "LASH_TEST_STEP_THEN_DIE=1", "LASH_TEST_NATS="+srv.URL(), "LASH_TEST_CHARGES="+charges)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil {
		t.Fatalf("the node was not killed:\n%s", out.String())
	} else if !killedBySIGKILL(cmd) {
		t.Fatalf("the node exited otherwise (%v):\n%s", err, out.String())
	}
	if b, _ := os.ReadFile(charges); strings.Count(string(b), "charged") != 1 {
		t.Fatalf("the killed node did not run the step once: %q\n%s", b, out.String())
	}
	n := r.node("second", WithTools(eventTools(t, charges, nil)), WithSecret(testSecret))
	res, err := n.Session("card").Run(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("results %+v", res)
	}
	tr, err := n.Session("card").Transcript(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var result string
	for _, m := range tr {
		if m.Role == turn.RoleTool {
			result = m.Text
		}
	}
	b, _ := os.ReadFile(charges)
	if result != "charged 42" || strings.Count(string(b), "charged") != 1 {
		t.Fatalf("tool result %q, charges %q: the step ran %d times", result, b, strings.Count(string(b), "charged"))
	}
}

const twoEventsScript = `
rule two
  when user contains two
  when tools = 0
  call two {}

default
  say done waiting
`

// twoEventsNode serves and wakes a node whose tool "two" waits for the
// event "first" (with a deadline of firstWithin, if any) and then for
// "second", and answers with both values.
func twoEventsNode(t *testing.T, firstWithin time.Duration) (*rig, *Node) {
	t.Helper()
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(twoEventsScript))
	reg := eventTools(t, filepath.Join(t.TempDir(), "charges"), nil)
	two, err := tools.Func("two", "two approvals in turn", func(ctx context.Context, _ struct{}) (string, error) {
		a, err := tools.AwaitEvent(ctx, "first", firstWithin)
		if err != nil {
			return "", err
		}
		b, err := tools.AwaitEvent(ctx, "second", 0)
		if err != nil {
			return "", err
		}
		return "both " + string(a) + " " + string(b), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(two); err != nil {
		t.Fatal(err)
	}
	n := r.node("a", WithTools(reg), WithProjection(t.TempDir()), WithSecret(testSecret))
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 2)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	if _, _, err := n.Session("two").Send(r.ctx, "k1", Input{Text: "two"}); err != nil {
		t.Fatal(err)
	}
	parkedOn(t, n, "two")
	return r, n
}

// resolveTwo resolves the event name of the call "two" parked.
func resolveTwo(t *testing.T, r *rig, n *Node, name, value string) {
	t.Helper()
	id := eventID("two", "call_1", name)
	mac, err := n.mac("key", id)
	if err != nil {
		t.Fatal(err)
	}
	resolveEvent(t, r.conn(), id, id+"."+mac, value)
}

// A call that waits for one event and then another parks twice: the
// second wait is armed like the first, and its resolution wakes the call
// again (each event's wake has an id of its own).
func TestAwaitTwoEventsInOneCall(t *testing.T) {
	r, n := twoEventsNode(t, 0)
	resolveTwo(t, r, n, "first", `"one"`)
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ts := turnsOf(t, n, "two"); len(ts) != 2 || ts[1].Suspended != 1 {
			return fmt.Errorf("turns %+v; want the call parked again", ts)
		}
		return nil
	})
	resolveTwo(t, r, n, "second", `"two"`)
	res := lastAnswer(t, n.Session("two"))
	if res.Text != `both "one" "two"` {
		t.Fatalf("the call's result %q", res.Text)
	}
}

// The first wait's deadline timer is the call's: when it fires while the
// call waits for the second event (which has no deadline), it times out
// nothing.
func TestEarlierWaitsTimeoutTimesOutNothing(t *testing.T) {
	r, n := twoEventsNode(t, 3*time.Second)
	resolveTwo(t, r, n, "first", `"one"`)
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ts := turnsOf(t, n, "two"); len(ts) != 2 || ts[1].Suspended != 1 {
			return fmt.Errorf("turns %+v; want the call parked again", ts)
		}
		return nil
	})
	// The first wait's timer fires (its schedule goes) and is handled.
	testenv.WaitFor(t, 30*time.Second, func() error {
		var left []string
		err := n.Streams().Read(r.ctx, "lash.timer.at.timeout.>", 0, func(m *streams.Msg) error {
			left = append(left, m.Subject)
			return nil
		})
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("timeout timers not fired: %v", left)
		}
		return err
	})
	timersSettled(t, n)
	if rec, err := n.resolutionOf(r.ctx, eventID("two", "call_1", "second")); err == nil {
		t.Fatalf("the second event, which no one resolved and has no deadline, holds %+v", rec)
	}
	resolveTwo(t, r, n, "second", `"two"`)
	if res := lastAnswer(t, n.Session("two")); res.Text != `both "one" "two"` {
		t.Fatalf("the call's result %q", res.Text)
	}
}
