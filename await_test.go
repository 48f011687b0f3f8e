package lash

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
)

// buildNode is a node with the process tools and a "build" tool that runs
// until release is closed (nil: at once).
func buildNode(t *testing.T, r *rig, release <-chan struct{}) *Node {
	t.Helper()
	reg := tools.New()
	build, err := tools.Func("build", "build a target", func(ctx context.Context, a struct {
		Target string `json:"target"`
	}) (string, error) {
		if release != nil {
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "built " + a.Target, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(build); err != nil {
		t.Fatal(err)
	}
	n := r.node("bg", WithTools(reg), WithProjection(t.TempDir()))
	for _, tool := range n.ProcessTools() {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// suspendedIn waits until the projection shows want calls parked in the
// session.
func suspendedIn(t *testing.T, n *Node, session string, want int) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, func() error {
		h, err := n.Projection().Session(session)
		if err == nil && h.Suspended != want {
			err = fmt.Errorf("%d calls suspended in %s, want %d", h.Suspended, session, want)
		}
		return err
	})
}

const grantScript = `
rule told
  when notice contains [process
  say noted

rule start
  when user contains start it
  when tools = 0
  call process_start {"tool":"build","args":{"target":"all"},"name":"all"}

rule started
  when user contains start it
  when tool contains started
  say started

rule watch
  when user contains wait for it
  when tools = 0
  call process_await {"process":"p-efcd83dad79af8dd189d45d0"}

rule watched
  when user contains wait for it
  when tool contains built all
  say it is built
`

// A session granted a process it did not start (lash-admin processes
// grant) may await it; when the process ends, its parked call is resumed
// as the wake target is told.
func TestGranteesAwaitWoken(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(grantScript))
	release := make(chan struct{})
	n := buildNode(t, r, release)
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 3)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	go func() { n.RunProcesses(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })

	pid := builtin.NamedProcessID("builder", "all")
	if pid != "p-efcd83dad79af8dd189d45d0" { // the script's
		t.Fatalf("pid %s", pid)
	}
	if _, _, err := n.Session("builder").Send(ctx, "k1", Input{Text: "start it"}); err != nil {
		t.Fatal(err)
	}
	waitForAnswer(t, n.Session("builder"), "started")
	if _, err := n.Processes().Grant(ctx, pid, "watcher", ""); err != nil {
		t.Fatal(err)
	}
	w := n.Session("watcher")
	if _, _, err := w.Send(ctx, "k1", Input{Text: "wait for it"}); err != nil {
		t.Fatal(err)
	}
	suspendedIn(t, n, "watcher", 1)
	timersSettled(t, n) // the call's recheck found the process running
	close(release)
	if p, err := n.Processes().Await(ctx, pid); err != nil || p.Status() != processes.Completed {
		t.Fatalf("process: %v, %v", p, err)
	}
	waitForAnswer(t, n.Session("builder"), "noted") // the wake target
	waitForAnswer(t, w, "it is built")
}

const endRaceScript = `
rule told
  when notice contains [process
  when not tool contains built all
  say noted the end

rule now
  when user contains build now
  when tools = 0
  call process_start {"tool":"build","args":{"target":"all"},"name":"all"}

rule wait
  when tool contains started
  call process_await {"process":"all"}

rule done
  when tool contains built all
  say the build finished

default
  say nothing to do
`

// ADR 0022's race: the process ends between process_await's pending answer
// and the commit that parks the call, so a teller that looked before the
// commit told the end as a text input. The call's recheck timer finds the
// call parked while that text still waits for a turn: it resumes the call
// under the call's own key, not the text's, which the session would refuse
// as that key's other content, leaving the call parked for good.
func TestAwaitRecheckWhileEndTextWaits(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(endRaceScript))
	n := buildNode(t, r, nil)
	ctx, cancel := context.WithCancel(r.ctx)
	woke := make(chan struct{})
	go func() { n.Wake(ctx); close(woke) }()
	sctx, stopServe := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { n.Serve(sctx); close(served) }()
	t.Cleanup(func() { cancel(); <-woke; <-served })

	pid := builtin.NamedProcessID("builder", "all")
	s := n.Session("builder")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "build now"}); err != nil {
		t.Fatal(err)
	}
	suspendedIn(t, n, "builder", 1)
	// No worker runs here: the test ends the process as its runner would,
	// with the dispatch stopped, so the text waits.
	stopServe()
	<-served
	run, err := n.procs.Start(ctx, pid, n.leases.Owner())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Complete(ctx, json.RawMessage(`"built all"`)); err != nil {
		t.Fatal(err)
	}
	p, err := n.procs.Get(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("[process %s (%s) %s] %s", p.ID, processName(p), p.Status(), builtin.ProcessOutcome(p))
	if _, _, err := s.Send(ctx, processWakeKey(pid), Input{Notice: text}); err != nil {
		t.Fatal(err)
	}
	timersSettled(t, n) // the recheck fired while the text waited
	served = make(chan struct{})
	go func() { n.Serve(ctx); close(served) }()
	suspendedIn(t, n, "builder", 0)
}
