package lash

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

const backgroundScript = `
rule later
  when user contains docs later
  when tools = 0
  call process_start {"tool":"build","args":{"target":"docs"},"name":"docs"}

rule later-started
  when user contains docs later
  when tool contains started
  say building the docs in the background

rule told
  when user contains [process
  when user contains completed
  say the docs are built

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
`

// backgroundNode serves, wakes and runs processes, with the process tools
// and a "build" tool that waits for release before it returns.
func backgroundNode(t *testing.T, r *rig, release <-chan struct{}, builds *atomic.Int32) (*Node, context.Context) {
	t.Helper()
	r.models = testenv.RunModelServer(t, scripted.MustParse(backgroundScript))
	reg := tools.New()
	build, err := tools.Func("build", "build a target", func(ctx context.Context, a struct {
		Target string `json:"target"`
	}) (string, error) {
		builds.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
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
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 3)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	go func() {
		if err := n.RunProcesses(ctx); err != nil {
			t.Errorf("RunProcesses: %v", err)
		}
		done <- struct{}{}
	}()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })
	return n, ctx
}

func waitForAnswer(t *testing.T, s *Session, want string) []turn.Message {
	t.Helper()
	var tr []turn.Message
	testenv.WaitFor(t, 20*time.Second, func() error {
		var err error
		if tr, err = s.Transcript(context.Background()); err != nil {
			return err
		}
		if len(tr) == 0 || tr[len(tr)-1].Text != want {
			return fmt.Errorf("no answer %q yet: %s", want, describeTranscript(tr))
		}
		return nil
	})
	return tr
}

// A turn starts a background tool and parks on process_await: the node
// runs the tool as a process, and its end resumes the parked call, whose
// result is the tool's; the session's next turn goes on from there.
func TestProcessAwaitResumesParkedCall(t *testing.T) {
	release := make(chan struct{})
	var builds atomic.Int32
	n, ctx := backgroundNode(t, newRig(t), release, &builds)
	s := n.Session("builder")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "build now"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		h, err := n.Projection().Session("builder")
		if err == nil && (h.Suspended != 1 || builds.Load() != 1) {
			err = fmt.Errorf("%d calls suspended, %d builds running", h.Suspended, builds.Load())
		}
		return err
	})
	close(release)
	tr := waitForAnswer(t, s, "the build finished")
	pid := builtin.NamedProcessID("builder", "all")
	p, err := n.Processes().Get(ctx, pid)
	if err != nil || p.Status() != processes.Completed || p.Attempts() != 1 || p.Registration.Provenance.Session != "builder" {
		t.Fatalf("process %+v, %v", p, err)
	}
	turns, err := NewInspector(n.Streams()).Turns(ctx, "builder")
	if err != nil || len(turns) != 2 || turns[0].Termination.Reason != turn.Suspended {
		t.Fatalf("turns %+v, %v; want a suspended turn and the one that went on", turns, err)
	}
	// The end was told once, as the decision that resumed the call: no
	// other input under the process's wake key.
	k, ok, err := n.Projection().InputKey("builder", processWakeKey(pid))
	if err != nil || !ok {
		t.Fatalf("wake key: %v, %v", ok, err)
	}
	if got := builds.Load(); got != 1 {
		t.Fatalf("the tool ran %d times", got)
	}
	for _, m := range tr {
		if m.Role == turn.RoleUser && strings.Contains(m.Text, "[process") {
			t.Fatalf("the end was told as an input too (key first used by %d): %s", k.Seq, describeTranscript(tr))
		}
	}
}

// A background tool the model does not wait for tells its session when it
// ends: an input starts the next turn.
func TestProcessEndWakesSession(t *testing.T) {
	release := make(chan struct{})
	close(release)
	var builds atomic.Int32
	n, ctx := backgroundNode(t, newRig(t), release, &builds)
	s := n.Session("writer")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "docs later"}); err != nil {
		t.Fatal(err)
	}
	tr := waitForAnswer(t, s, "the docs are built")
	var told string
	for _, m := range tr {
		if m.Role == turn.RoleUser && strings.HasPrefix(m.Text, "[process") {
			told = m.Text
		}
	}
	pid := builtin.NamedProcessID("writer", "docs")
	if want := fmt.Sprintf("[process %s (tool build) completed] built docs", pid); told != want {
		t.Fatalf("told %q, want %q", told, want)
	}
	if got := builds.Load(); got != 1 {
		t.Fatalf("the tool ran %d times", got)
	}
}
