package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/triggers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const napScript = `
rule nap
  when user contains nap
  when tools = 0
  call sleep {"seconds":2}

rule rested
  when user contains nap
  when tool contains slept until
  say rested

default
  say noted
`

// arrivals notes when the first message arrives on each subject; keep,
// if not nil, picks the messages that count.
type arrivals struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func arrive(t testing.TB, nc *nats.Conn, subject string, keep func(*nats.Msg) bool) *arrivals {
	t.Helper()
	a := &arrivals{first: map[string]time.Time{}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		if keep != nil && !keep(m) {
			return
		}
		a.mu.Lock()
		if _, ok := a.first[m.Subject]; !ok {
			a.first[m.Subject] = time.Now()
		}
		a.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

// count is how many subjects had a message.
func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.first)
}

// at is when subject had its first message.
func (a *arrivals) at(subject string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.first[subject]
	return at, ok
}

// all lists the first arrivals.
func (a *arrivals) all() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Time
	for _, t := range a.first {
		out = append(out, t)
	}
	return out
}

// takeover is what TestSIGKILLTakeover measured, the longest wait of each
// kind of work: a signal's from its storing to its occurrence's record, a
// fired timer's from its firing to the wake of its sleep, a process's from
// the kill to its next attempt's start.
type takeover struct {
	signals, timers, processes time.Duration
}

// The node running background work, handling a burst of signals (each
// delivered to a trigger subscription) and a burst of fired timers is
// SIGKILLed; a node on the same host proves it dead by its PID and takes
// every piece of its work over, once: each signal is one occurrence with
// one delivery whose process completes, each sleep wakes its session once,
// and each process running the dead node's tool is run again, in doubt,
// and completes. Leases live 30 s, and a dead node's deliveries came back
// after 30 s: all of it is done long before either.
func TestSIGKILLTakeover(t *testing.T) {
	took := sigkillTakeover(t)
	t.Logf("longest waits: a signal %s, a fired timer %s, a process from the kill to its next start %s", took.signals, took.timers, took.processes)
}

func sigkillTakeover(t testing.TB) takeover {
	d := newDeployment(t)
	count := serveCount(t, d.url, "t_count", 8, 100*time.Millisecond)
	// The slow tool answers only once its calls were started again.
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	slow := serveGated(t, d.url, "t_slow", 8, 0, gate)
	victim := d.node("victim", napScript, "--lease-ttl", "30s")
	d.admin(&struct{}{}, "triggers", "register", "counts", "--source", "count.>", "--tool", "t_count")
	api := nodeapi.NewClient(d.nc, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The victim alone runs three slow processes and parks twenty sleeps.
	started := func(attempt int) func(*nats.Msg) bool {
		return func(m *nats.Msg) bool {
			// An attempt starts with its own event, or, the first one run
			// where it is registered, in the registration.
			var e struct {
				Type string `json:"type"`
				Data struct {
					Attempt int `json:"attempt"`
				} `json:"data"`
				Start *struct {
					Attempt int `json:"attempt"`
				} `json:"start"`
			}
			if !strings.Contains(m.Subject, ".slow-") || json.Unmarshal(m.Data, &e) != nil {
				return false
			}
			return e.Type == "started" && e.Data.Attempt == attempt || e.Type == "registered" && e.Start != nil && e.Start.Attempt == attempt
		}
	}
	begun := arrive(t, d.nc, "lash.proc.*.ev", started(1))
	restarted := arrive(t, d.nc, "lash.proc.*.ev", started(2))
	for i := range 3 {
		if _, err := api.ProcessStart(ctx, nodeapi.ProcessStartRequest{ID: fmt.Sprint("slow-", i), Tool: "t_slow", Args: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if n := begun.count(); n != 3 {
			return fmt.Errorf("%d slow processes started", n)
		}
		return nil
	})
	woken := arrive(t, d.nc, "lash.sess.*.decide", nil)
	recorded := arrive(t, d.nc, "lash.trig.occ.>", nil)
	for i := range 20 {
		d.send(fmt.Sprint("nap-", i), "k1", []byte(`{"text":"nap"}`))
	}
	survivor := d.node("survivor", napScript, "--lease-ttl", "30s")
	// Timers fire, signals come in: the victim is killed in the midst.
	testenv.WaitFor(t, 30*time.Second, func() error {
		if woken.count() == 0 {
			return fmt.Errorf("no sleep woken yet")
		}
		return nil
	})
	for i := range 40 {
		m := nats.NewMsg(fmt.Sprintf("lash.signal.count.%d", i))
		m.Header.Set("Nats-Msg-Id", fmt.Sprint("count-", i))
		m.Data = []byte(`{}`)
		if err := d.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if recorded.count() == 0 {
			return fmt.Errorf("no signal recorded yet")
		}
		return nil
	})
	killed := time.Now()
	victim.kill()

	// Everything is done, once, long before a lease or an old ack wait.
	testenv.WaitFor(t, 25*time.Second, func() error {
		r, w := recorded.count(), woken.count()
		if r != 40 || w != 20 {
			return fmt.Errorf("%d of 40 signals recorded, %d of 20 sleeps woken", r, w)
		}
		if n := restarted.count(); n != 3 {
			return fmt.Errorf("%d of 3 slow processes started again", n)
		}
		return nil
	})
	// How long each piece of work waited: from the signal's or the fired
	// timer's time on its stream to the record or the wake it made, and
	// from the kill to each process's next start.
	open()
	var took takeover
	js, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(stream, subject string) time.Time {
		t.Helper()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatalf("%s on %s: %v", subject, stream, err)
		}
		return m.Time
	}
	for i := range 40 {
		sent := stored("LASH_TRIGGERS", fmt.Sprintf("lash.signal.count.%d", i))
		occ := triggers.OccurrenceID("count", fmt.Sprint(i), fmt.Sprint("count-", i))
		at, ok := recorded.at("lash.trig.occ." + occ)
		if !ok {
			t.Fatalf("signal %d: no record of occurrence %s", i, occ)
		}
		took.signals = max(took.signals, at.Sub(sent))
	}
	for i := range 20 {
		// The timer fires at the sleep's end, rounded up to the second; its
		// message is removed once handled.
		session := fmt.Sprint("nap-", i)
		firedAt := sleepEnd(t, d, session)
		at, _ := woken.at("lash.sess." + session + ".decide")
		took.timers = max(took.timers, at.Sub(firedAt))
	}
	for _, at := range restarted.all() {
		took.processes = max(took.processes, at.Sub(killed))
	}
	for i := range 20 {
		answers := 0
		for _, m := range d.waitAnswer(fmt.Sprint("nap-", i), "rested") {
			if m.Role == "assistant" && m.Text == "rested" {
				answers++
			}
		}
		if answers != 1 {
			t.Fatalf("nap-%d rested %d times", i, answers)
		}
	}
	var ps processList
	testenv.WaitFor(t, 45*time.Second, func() error {
		ps = processList{}
		if err := d.tryAdmin(&ps, "processes", "ls"); err != nil {
			return err
		}
		done := 0
		for _, p := range ps.Processes {
			if p.Status == "completed" {
				done++
			}
		}
		if len(ps.Processes) != 43 || done != 43 {
			return fmt.Errorf("%d processes, %d completed; want 43", len(ps.Processes), done)
		}
		return nil
	})
	// Each slow call ran again after the kill once, in doubt.
	begins, _ := slow.calls()
	again := map[string]int{}
	for _, b := range begins {
		if b.attempt == 2 && b.inDoubt {
			again[b.key]++
		} else if b.attempt != 1 {
			t.Fatalf("a slow call %+v: want attempt 1, or 2 in doubt", b)
		}
	}
	for i := range 3 {
		if key := fmt.Sprintf("/proc:slow-%d/0/tool-call/0/slow-%d", i, i); again[key] != 1 {
			t.Fatalf("slow-%d ran %d times after the kill: %v", i, again[key], again)
		}
	}
	// Each delivery's tool ran once per attempt of its process, no more.
	attempts := map[string]int{}
	for _, p := range ps.Processes {
		attempts["/proc:"+p.ID+"/0/tool-call/0/"+p.ID] = p.Attempts
	}
	runs := map[string]int{}
	cb, _ := count.calls()
	for _, b := range cb {
		runs[b.key]++
	}
	if len(runs) != 40 {
		t.Fatalf("the deliveries' tool ran for %d keys, want 40", len(runs))
	}
	for key, n := range runs {
		if n > attempts[key] {
			t.Fatalf("%s: the tool ran %d times in %d attempts", key, n, attempts[key])
		}
	}
	var occ struct {
		Occurrences []struct {
			ID         string   `json:"id"`
			Deliveries []string `json:"deliveries"`
		} `json:"occurrences"`
	}
	d.admin(&occ, "triggers", "occurrences", "--limit", "1000")
	if len(occ.Occurrences) != 40 {
		t.Fatalf("%d occurrences, want 40", len(occ.Occurrences))
	}
	for _, o := range occ.Occurrences {
		if len(o.Deliveries) != 1 {
			t.Fatalf("occurrence %s: deliveries %v", o.ID, o.Deliveries)
		}
	}
	if !strings.Contains(strings.Join(survivor.lines(), "\n"), "lash-node running") {
		t.Fatal("the survivor never ran")
	}
	return took
}

// BenchmarkTakeoverSIGKILL: what TestSIGKILLTakeover does, reporting the
// time from the kill to the last signal, fired timer and process the
// survivor took over.
//
//	go test ./e2e -run '^$' -bench TakeoverSIGKILL -benchtime 3x
func BenchmarkTakeoverSIGKILL(b *testing.B) {
	var sum takeover
	for range b.N {
		took := sigkillTakeover(b)
		sum.signals += took.signals
		sum.timers += took.timers
		sum.processes += took.processes
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(ms(sum.signals), "ms/signals")
	b.ReportMetric(ms(sum.timers), "ms/timers")
	b.ReportMetric(ms(sum.processes), "ms/processes")
}

// sleepEnd is when the sleep a session's call parked on fires: the end its
// ticket names, rounded up to the second as timers are.
func sleepEnd(t testing.TB, d *deployment, session string) time.Time {
	t.Helper()
	var tr struct {
		Messages []transcriptMessage `json:"messages"`
	}
	d.admin(&tr, "transcript", session)
	for _, m := range tr.Messages {
		if until, ok := strings.CutPrefix(m.Text, "awaiting decision: sleep-until "); ok {
			at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(until))
			if err != nil {
				t.Fatal(err)
			}
			if at.Nanosecond() != 0 {
				at = at.Truncate(time.Second).Add(time.Second)
			}
			return at
		}
	}
	t.Fatalf("%s parked on no sleep: %+v", session, tr.Messages)
	return time.Time{}
}
