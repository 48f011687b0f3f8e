package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

const backgroundScript = `
# First: a sub-agent's end that comes before its await parks is told
# twice (a notice, then the parked call's answer), and the answer counts.
rule helper-done
  when tool contains summary: all quiet
  say the helper says all is quiet

rule told
  when notice contains [process
  when notice contains completed
  say the docs are built

rule child
  when user contains summarize the logs
  say summary: all quiet

rule spawn
  when user contains ask a helper
  when tools = 0
  call spawn_agent {"task":"summarize the logs","name":"helper","tools":["build"]}

rule await-helper
  when user contains ask a helper
  when tool contains started
  call process_await {"process":"helper"}

rule list
  when user contains list them
  when not tool contains [
  call process_list

rule listed
  when user contains list them
  when tool contains [
  say listed

rule later
  when user contains docs later
  when tools = 0
  call process_start {"tool":"build","args":{"target":"docs"},"name":"docs"}

rule later-started
  when user contains docs later
  when tool contains started
  say building the docs in the background

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
	deploy, err := tools.Func("deploy", "deploy a build", func(ctx context.Context, a struct{}) (string, error) { return "deployed", nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(reg.Register(build), reg.Register(deploy)); err != nil {
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
	// The projection folds the commit after the answer is read.
	var k projector.InputKey
	testenv.WaitFor(t, 10*time.Second, func() error {
		var ok bool
		var err error
		if k, ok, err = n.Projection().InputKey("builder", processWakeKey(pid)); err == nil && !ok {
			err = errors.New("the wake key is not in the projection")
		}
		return err
	})
	if got := builds.Load(); got != 1 {
		t.Fatalf("the tool ran %d times", got)
	}
	for _, m := range tr {
		if (m.Role == turn.RoleUser || m.Role == turn.RoleSystem) && strings.Contains(m.Text, "[process") {
			t.Fatalf("the end was told as an input too (key first used by %d): %s", k.Seq, describeTranscript(tr))
		}
	}
}

// A background tool the model does not wait for tells its session when it
// ends: a notice starts the next turn, which the model reads as a system
// message, never as the user's.
func TestProcessEndWakesSession(t *testing.T) {
	release := make(chan struct{})
	close(release)
	var builds atomic.Int32
	r := newRig(t)
	n, ctx := backgroundNode(t, r, release, &builds)
	s := n.Session("writer")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "docs later"}); err != nil {
		t.Fatal(err)
	}
	tr := waitForAnswer(t, s, "the docs are built")
	var told string
	for _, m := range tr {
		if m.Role == turn.RoleSystem && strings.HasPrefix(m.Text, "[process") {
			told = m.Text
		}
	}
	pid := builtin.NamedProcessID("writer", "docs")
	if want := fmt.Sprintf("[process %s (tool build) completed] built docs", pid); told != want {
		t.Fatalf("told %q, want %q", told, want)
	}
	// On the wire: the model server saw the end as a system message.
	seen := r.models.Seen()
	last := seen[len(seen)-1].Request.Messages
	var roles []turn.Role
	for _, m := range last {
		if strings.Contains(m.Text, "[process") {
			roles = append(roles, m.Role)
		}
	}
	if len(roles) != 1 || roles[0] != turn.RoleSystem {
		t.Fatalf("the model read the end in messages of roles %v; want one system message", roles)
	}
	if got := builds.Load(); got != 1 {
		t.Fatalf("the tool ran %d times", got)
	}
}

// A turn spawns a sub-agent and parks on it: the sub-agent's task is the
// first turn of a session of its own, run by the node's dispatch, and its
// final answer resumes the parked call.
func TestSpawnAgent(t *testing.T) {
	release := make(chan struct{})
	close(release)
	var builds atomic.Int32
	n, ctx := backgroundNode(t, newRig(t), release, &builds)
	s := n.Session("lead")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "ask a helper"}); err != nil {
		t.Fatal(err)
	}
	waitForAnswer(t, s, "the helper says all is quiet")
	pid := builtin.NamedProcessID("lead", "helper")
	p, err := n.Processes().Get(ctx, pid)
	if err != nil || p.Status() != processes.Completed || string(p.End.Data) != `"summary: all quiet"` {
		t.Fatalf("sub-agent process %+v, %v", p, err)
	}
	if in := p.Registration.Input; in.Kind != processes.SessionTurn || in.Session != pid || in.Depth != 1 {
		t.Fatalf("sub-agent input %+v", in)
	}
	child, err := n.Session(pid).Transcript(ctx)
	if err != nil || len(child) != 2 || child[0].Text != "summarize the logs" || child[1].Text != "summary: all quiet" {
		t.Fatalf("the sub-agent's conversation: %s, %v", describeTranscript(child), err)
	}
	specs, err := n.toolSpecs(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "build,process_await,process_cancel,process_list,process_start,spawn_agent" {
		t.Fatalf("the sub-agent is offered %s", got)
	}
}

// The process read model follows the stream: a process by status and by
// the sessions holding grants, moved when they change, and equal to a
// fresh fold of the stream.
func TestProcessProjection(t *testing.T) {
	release := make(chan struct{})
	close(release)
	var builds atomic.Int32
	n, ctx := backgroundNode(t, newRig(t), release, &builds)
	s := n.Session("writer")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "docs later"}); err != nil {
		t.Fatal(err)
	}
	waitForAnswer(t, s, "the docs are built")
	pid := builtin.NamedProcessID("writer", "docs")
	proj := n.ProcessProjection()
	ids := func(ps []*processes.Process, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return strings.Join(out, ",")
	}
	caughtUp := func() {
		t.Helper()
		last, err := n.Streams().LastSeq(ctx, streams.Processes)
		if err != nil {
			t.Fatal(err)
		}
		if err := proj.WaitFor(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp()
	if got := ids(proj.ProcessesIn(processes.Completed)); got != pid {
		t.Fatalf("completed processes %q, want %s", got, pid)
	}
	if got := ids(proj.ProcessesIn(processes.Pending)); got != "" {
		t.Fatalf("pending processes %q, want none", got)
	}
	if got := ids(proj.ProcessesOf("writer")); got != pid {
		t.Fatalf("processes of writer %q, want %s", got, pid)
	}
	if _, err := n.Processes().Grant(ctx, pid, "reader", "writer"); err != nil {
		t.Fatal(err)
	}
	caughtUp()
	if got, other := ids(proj.ProcessesOf("writer")), ids(proj.ProcessesOf("reader")); got != "" || other != pid {
		t.Fatalf("after a transfer: writer %q, reader %q", got, other)
	}
	// The reader lists it with process_list; the writer no longer does.
	for _, who := range []string{"reader", "writer"} {
		if _, _, err := n.Session(who).Send(ctx, "list", Input{Text: "list them"}); err != nil {
			t.Fatal(err)
		}
		tr := waitForAnswer(t, n.Session(who), "listed")
		listing := tr[len(tr)-2].Text
		if want := who == "reader"; strings.Contains(listing, pid) != want || want && !strings.Contains(listing, `"status":"completed"`) {
			t.Fatalf("%s lists %s", who, listing)
		}
	}
	fresh, err := OpenProcessProjection(t.TempDir(), n.Streams())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := fresh.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	a, errA := proj.Process(pid)
	b, errB := fresh.Process(pid)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if errA != nil || errB != nil || string(ja) != string(jb) {
		t.Fatalf("the kept read model and a fresh fold differ:\n%s\n%s\n%v %v", ja, jb, errA, errB)
	}
	// Pruned, it leaves the read model too.
	if pruned, err := n.Processes().Prune(ctx, time.Now().Add(time.Hour)); err != nil || len(pruned) != 1 {
		t.Fatalf("prune: %v, %v", pruned, err)
	}
	caughtUp()
	if _, err := proj.Process(pid); !errors.Is(err, projector.ErrNotFound) {
		t.Fatalf("a pruned process in the read model: %v", err)
	}
	if got := ids(proj.ProcessesOf("reader")) + ids(proj.ProcessesIn(processes.Completed)); got != "" {
		t.Fatalf("a pruned process in the indexes: %q", got)
	}
}
