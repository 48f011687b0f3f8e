package lash

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/triggers"
	"github.com/nats-io/nats.go"
)

const holdScript = `
rule told
  when notice contains [process
  say noted

rule nap
  when user contains nap
  when tools = 0
  call sleep {"seconds":2}

rule rested
  when user contains nap
  when tool contains slept until
  say rested

`

// TestHoldThenDie is a node that takes signals and fired timers and holds
// each, doing nothing with it, until it is killed, when the test binary
// runs itself as a separate process; otherwise it does nothing.
func TestHoldThenDie(t *testing.T) {
	if os.Getenv("LASH_TEST_HOLD_THEN_DIE") == "" {
		t.Skip("runs only as the holding node of TestSIGKILLWhileHolding")
	}
	r := childRig(t, holdScript)
	var mu sync.Mutex
	n := r.node("holder", WithProjection(t.TempDir()), withHold(func(kind, subject string) {
		mu.Lock()
		fmt.Printf("holding %s %s\n", kind, subject)
		mu.Unlock()
		select {} // until killed
	}))
	fmt.Println("ready")
	n.Wake(r.ctx)
}

// A node that holds signals and fired timers it has taken (its handling
// stopped before doing anything) is SIGKILLed; a live node takes each of
// them over once: every signal is one occurrence whose delivery's process
// completes once, every sleep wakes its session once. The dead node's
// deliveries come back within the consumers' ack wait, long before the
// 30 s the signals' consumer once waited.
func TestSIGKILLWhileHolding(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	srv := testenv.RunJetStream(t)
	r := &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return srv.Conn(t) }, replicas: 1,
		models: testenv.RunModelServer(t, scripted.MustParse(holdScript)), runs: &counter{runs: map[string]int{}}}
	runs := filepath.Join(t.TempDir(), "runs")
	reg := handleTools(t, runs)
	if err := builtin.Register(reg, "lash", time.Now); err != nil {
		t.Fatal(err)
	}
	live, _ := runNode(t, r, "live", runs, WithTools(reg))
	ctx := r.ctx
	spec := &triggers.Spec{SourceType: "deploy", SourceKey: ">", Start: triggers.Target{Kind: processes.ToolCall, Tool: "handle", Args: json.RawMessage(`{"env":"prod"}`)}}
	if _, err := live.Triggers().Apply(ctx, triggers.Op{ID: "reg-all", Action: triggers.ActRegister, Owner: triggers.Owner{Kind: triggers.Host}, Key: "all", Spec: spec}, nil); err != nil {
		t.Fatal(err)
	}
	nc := r.conn()
	recorded, woken := map[string]time.Time{}, map[string]time.Time{}
	var mu sync.Mutex
	note := func(into map[string]time.Time) nats.MsgHandler {
		return func(m *nats.Msg) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := into[m.Subject]; !ok {
				into[m.Subject] = time.Now()
			}
		}
	}
	subj := live.Streams().Subjects()
	for filter, into := range map[string]map[string]time.Time{subj.AllTriggers("occ"): recorded, "lash.sess.*.decide": woken} {
		sub, err := nc.Subscribe(filter, note(into))
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldThenDie$")
	cmd.Env = append(os.Environ(), "LASH_TEST_HOLD_THEN_DIE=1", "LASH_TEST_NATS="+srv.URL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	var held []string // "signal <subject>" or "timer <subject>"
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(ready)
			}
			if h, ok := strings.CutPrefix(line, "holding "); ok {
				mu.Lock()
				held = append(held, h)
				mu.Unlock()
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the holding node never started")
	}
	holding := func(kind string) []string {
		mu.Lock()
		defer mu.Unlock()
		return heldOf(held, kind)
	}
	// Sleeps that fire in two seconds, and signals: both nodes take them.
	for i := range 20 {
		if _, _, err := live.Session(fmt.Sprint("nap-", i)).Send(ctx, "k1", Input{Text: "nap"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		s := strings.TrimSuffix(subj.Signals(), ">") + fmt.Sprint("deploy.", i)
		if err := nc.PublishMsg(&nats.Msg{Subject: s, Data: []byte(`{}`), Header: nats.Header{"Nats-Msg-Id": []string{fmt.Sprint("d-", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if s, tm := len(holding("signal")), len(holding("timer")); s == 0 || tm == 0 {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("the holding node holds %d signals and %d timers; %d sleeps woken, %d signals recorded", s, tm, len(woken), len(recorded))
		}
		return nil
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	killed := time.Now()

	// Everything is done, once, well within the 30 s the held signals
	// once waited.
	testenv.WaitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(recorded) != 40 || len(woken) != 20 {
			return fmt.Errorf("%d of 40 signals recorded, %d of 20 sleeps woken", len(recorded), len(woken))
		}
		return nil
	})
	waitProcesses(t, ctx, live.Processes(), 40)
	if got := readRuns(t, runs); len(got) != 40 {
		t.Fatalf("the deliveries' tool ran %d times, want 40: %v", len(got), got)
	}
	for i := range 20 {
		answers := 0
		for _, m := range waitForAnswer(t, live.Session(fmt.Sprint("nap-", i)), "rested") {
			if m.Text == "rested" {
				answers++
			}
		}
		if answers != 1 {
			t.Fatalf("nap-%d rested %d times", i, answers)
		}
	}
	// How long the held work waited after the kill.
	mu.Lock()
	defer mu.Unlock()
	var signals, timers time.Duration
	for _, s := range heldOf(held, "signal") {
		rest, _ := subj.SignalRest(s)
		typ, key, err := triggers.Source(rest)
		if err != nil {
			t.Fatal(err)
		}
		occ, err := subj.TriggerOccurrence(triggers.OccurrenceID(typ, key, "d-"+strings.TrimPrefix(key, "")))
		if err != nil {
			t.Fatal(err)
		}
		signals = max(signals, recorded[occ].Sub(killed))
	}
	for _, s := range heldOf(held, "timer") {
		_, session, _, err := subj.TimerOf(s)
		if err != nil {
			t.Fatal(err)
		}
		timers = max(timers, woken["lash.sess."+session+".decide"].Sub(killed))
	}
	t.Logf("held %d signals and %d timers; after the kill the last of them was recorded in %s, woken in %s",
		len(heldOf(held, "signal")), len(heldOf(held, "timer")), signals, timers)
}

// heldOf lists the subjects of the held work of one kind.
func heldOf(held []string, kind string) []string {
	var subjects []string
	for _, h := range held {
		if s, ok := strings.CutPrefix(h, kind+" "); ok {
			subjects = append(subjects, s)
		}
	}
	return subjects
}
