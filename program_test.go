package lash

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

// programScript answers in code mode with a program that calls a tool,
// the model, then two tools at once; the model's call inside the program
// is a conversation of its own ("sum up ...").
const programScript = `
rule summary
  when user contains sum up
  say Cold.
  usage 5 1

rule program
  when tools = 0
  call run_program {"program": "a = weather(city='Oslo')\nsummary = llm('sum up ' + a)\nr = parallel([call(weather, city='Lima'), call(weather, city='Pune')])\nresult = [a, summary, r[0].value, r[1].value]"}
  usage 40 30

default
  say Oslo is cold, Lima is grey, Pune is hot.
  usage 90 12
`

var programCalls = matrix{programScript, "Weather in Oslo, Lima and Pune?",
	[]string{"sync-tools 1", "llm-call 2", "tool call_1#0", "llm call_1#1", "tool call_1#2", "tool call_1#3", "program call_1"},
	[]Option{WithMachine(turn.Config{Model: "scripted", System: "You are a weather agent.", Mode: turn.ModeCode})},
	map[string]string{"call_1#0": "Oslo", "call_1#2": "Lima", "call_1#3": "Pune"}}

// A program's calls are durable: the turn ends as a tool round's would,
// each tool ran once, and the program's model call was made once.
func TestProgramRuns(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(programScript))
	s := r.node("a", programCalls.opts...).Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: programCalls.text}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("results %+v", res)
	}
	msgs := res[0].Outcome.Messages
	if len(msgs) != 4 || msgs[2].Role != turn.RoleTool || msgs[2].Text != `result: ["2C snow","Cold.","18C grey","33C sun"]` {
		t.Fatalf("transcript:\n%s", describeTranscript(msgs))
	}
	for city, n := range r.runs.runs {
		if n != 1 {
			t.Errorf("%s ran %d times", city, n)
		}
	}
	if len(r.runs.runs) != 3 || r.models.Requests() != 3 {
		t.Fatalf("tool runs %v, model requests %d", r.runs.runs, r.models.Requests())
	}
	// The model is offered run_program alone, described with the tools.
	offered := r.models.Seen()[0].Request.Tools
	if len(offered) != 1 || offered[0].Name != turn.ProgramTool || !strings.Contains(offered[0].Description, "weather(city") {
		t.Fatalf("the first request offers %+v", offered)
	}
}

// A node that dies at any boundary of a program's calls leaves the turn to
// another, which runs the program again from its start: each recorded call
// answers from the journal, so every tool runs once and the model is asked
// each thing once, and the transcript is the crash-free one.
func TestProgramCrashAtEveryBoundary(t *testing.T) { crashMatrix(t, newRig, programCalls) }

// The same on a 3-node cluster with R3 streams.
func TestProgramCrashAtEveryBoundaryCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster crash matrix")
	}
	testenv.SkipClusterUnderRace(t)
	crashMatrix(t, newClusterRig, programCalls)
}

// boundsScript runs one program past each of its bounds, one a turn.
const boundsScript = `
rule loop
  when user contains loop
  when tools = 0
  call run_program {"program": "while True:\n  pass"}

rule alloc
  when user contains alloc
  when tools = 1
  call run_program {"program": "s = 'x'\nfor i in range(40):\n  s = s + s"}

rule print
  when user contains print
  when tools = 2
  call run_program {"program": "for i in range(1000000):\n  print('x' * 100)"}

rule calls
  when user contains calls
  when tools = 3
  call run_program {"program": "for i in range(200):\n  parallel([call(weather, city='x') for j in range(50)])"}

default
  say Noted.
`

// A program that loops forever, allocates without bound, prints 100 MB or
// makes 10,000 calls ends within its bounds with an error the model reads,
// and the session goes on with its next input.
func TestProgramBounds(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(boundsScript))
	s := r.node("a", programCalls.opts...).Session("s1")
	for i, c := range []struct{ text, want string }{
		{"loop", "error: the program ran "}, // its steps, or 10 s without a call: whichever comes first
		{"alloc", "error: the program used more than 512 MiB of memory"},
		{"print", "error: the program printed more than 65536 bytes"},
		{"calls", "error: the program made more than 1000 calls"},
	} {
		if _, _, err := s.Send(r.ctx, c.text, Input{Text: c.text}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Run(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
			t.Fatalf("%s: results %+v", c.text, res)
		}
		msgs := res[0].Outcome.Messages
		// What it printed before, then why it ended.
		if len(msgs) != 4 {
			t.Fatalf("%s: %d messages", c.text, len(msgs))
		}
		if got := msgs[2]; !got.Error || !strings.Contains(got.Text, c.want) || len(got.Text) > 70<<10 {
			t.Fatalf("%s: the program's %d bytes end %q", c.text, len(got.Text), got.Text[max(0, len(got.Text)-200):])
		}
		if i == 3 && r.runs.runs["x"] != 1000 {
			t.Fatalf("the tool ran %d times for 1000 calls", r.runs.runs["x"])
		}
	}
}

const parkProgramScript = `
rule program
  when tools = 0
  call run_program {"program": "a = weather(city='Oslo')\nok = wait_for_approval(request='ship?')\nb = weather(city='Lima')\nresult = [a, ok, b]"}

default
  say shipped
`

// A call inside a program that waits for a decision parks the program: the
// turn ends with the program call suspended, its calls so far kept with
// the commit. The decision resumes it in the next turn: the program runs
// again from its start, its earlier calls answer from what was kept, the
// waiting call takes the decision's payload, and the rest runs once.
func TestProgramParks(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(parkProgramScript))
	reg := builtins(t, r)
	n := r.node("a", append(programCalls.opts, WithTools(reg))...)
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "ship it"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.Suspended || len(res[0].Outcome.Suspended) != 1 {
		t.Fatalf("results %+v", res)
	}
	sc := res[0].Outcome.Suspended[0]
	if sc.Call.Name != turn.ProgramTool || sc.Program == nil || len(sc.Program.Calls) != 2 || sc.WaitingID() != "call_1#1" || sc.WaitingTool() != "wait_for_approval" {
		t.Fatalf("suspended %+v", sc)
	}
	if _, err := s.Decide(r.ctx, "d1", Decision{ID: "d1", CallID: sc.Call.ID, Action: "resume", Mode: "use-result", Payload: "yes"}); err != nil {
		t.Fatal(err)
	}
	if res, err = s.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("results %+v", res)
	}
	msgs := res[0].Outcome.Messages
	if len(msgs) != 2 || msgs[0].Text != `result: ["2C snow","yes","18C grey"]` {
		t.Fatalf("transcript:\n%s", describeTranscript(msgs))
	}
	if r.runs.runs["Oslo"] != 1 || r.runs.runs["Lima"] != 1 {
		t.Fatalf("tool runs %v", r.runs.runs)
	}
}

const sleepProgramScript = `
rule program
  when tools = 0
  call run_program {"program": "naps = parallel([call(tool, 'sleep', seconds=1), call(tool, 'sleep', seconds=1)])\nresult = weather(city='Pune')"}

default
  say rested
`

// A program whose calls wait on the node's own wakes (here two durable
// sleeps at once) parks on each in turn and is woken by the node's timers,
// under each waiting call's id, until it ends.
func TestProgramSleepsDurably(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(sleepProgramScript))
	reg := builtins(t, r)
	n := r.node("a", append(programCalls.opts, WithTools(reg), WithProjection(t.TempDir()))...)
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 2)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "rest, then Pune"}); err != nil {
		t.Fatal(err)
	}
	var msgs []turn.Message
	testenv.WaitFor(t, 30*time.Second, func() error {
		var err error
		if msgs, err = s.Transcript(r.ctx); err != nil {
			return err
		}
		if len(msgs) == 0 || msgs[len(msgs)-1].Text != "rested" {
			return fmt.Errorf("the session holds %d messages, not yet the answer", len(msgs))
		}
		return nil
	})
	var ended []string
	for _, m := range msgs {
		if m.Role == turn.RoleTool && !m.Pending {
			ended = append(ended, m.Text)
		}
	}
	if len(ended) != 1 || ended[0] != `result: "33C sun"` || r.runs.runs["Pune"] != 1 {
		t.Fatalf("program results %q, tool runs %v\n%s", ended, r.runs.runs, describeTranscript(msgs))
	}
}

// An agent's definition names its mode: its sessions run programs, the
// default agent's sessions on the same node call tools.
func TestAgentInCodeMode(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(programScript))
	n := r.node("a", WithProviders(providersOf(t, r.models, "openai")))
	applyAgent(t, n, &agents.Definition{Name: "coder", Instructions: "You write programs.", Provider: "openai", Model: "g",
		Tools: []string{"weather"}, Mode: "code", Limits: agents.Limits{ProgramCalls: 10}})
	// The model always answers with a program: the coder's runs, the
	// default agent's is a call of a tool it does not have.
	for agent, want := range map[string]string{"coder": "result: [", "": `blocked: unknown tool "run_program"`} {
		s := n.Session("s-" + agent)
		if _, _, err := s.Send(r.ctx, "k", Input{Text: "Weather in Oslo, Lima and Pune?", Agent: agent}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Run(r.ctx)
		if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
			t.Fatalf("%q: %+v, %v", agent, res, err)
		}
		if msgs := res[0].Outcome.Messages; len(msgs) < 3 || !strings.HasPrefix(msgs[2].Text, want) {
			t.Fatalf("%q: transcript\n%s", agent, describeTranscript(msgs))
		}
	}
}

// A node that dies at any boundary of a program that parks, or of its
// resumed run, leaves the session to another: the program parks once, its
// resumed run ends once, each tool runs once and the model is asked each
// thing once.
func TestProgramCrashWhileParked(t *testing.T) { crashWhileParked(t, newRig) }

// The same on a 3-node cluster with R3 streams.
func TestProgramCrashWhileParkedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster crash matrix")
	}
	testenv.SkipClusterUnderRace(t)
	crashWhileParked(t, newClusterRig)
}

func crashWhileParked(t *testing.T, newRig func(*testing.T) *rig) {
	for _, b := range []string{"after-record tool call_1#1", "before-commit", "after-commit",
		"before-record tool call_1#2", "after-record tool call_1#2", "before-record program call_1", "after-record program call_1"} {
		t.Run(strings.ReplaceAll(b, " ", "_"), func(t *testing.T) {
			r := newRig(t)
			r.models = testenv.RunModelServer(t, scripted.MustParse(parkProgramScript))
			reg := builtins(t, r)
			opts := append(programCalls.opts, WithTools(reg))
			conn := r.conn()
			hits := 0
			first := r.nodeOn(conn, "first", append(slices.Clip(opts), withBoundary(func(name string) error {
				if name == b {
					if hits++; hits == 1 {
						conn.Close()
						return errCrash
					}
				}
				return nil
			}))...)
			alive := first
			// run runs the session on the live node, or, once the first
			// died, on a second one.
			run := func() {
				t.Helper()
				if alive == first {
					if _, err := first.Session("s1").Run(r.ctx); err == nil {
						return
					} else if hits == 0 {
						t.Fatal(err)
					}
					first.Close(context.Background())
					alive = r.node("second", opts...)
				}
				runUntilFree(t, alive.Session("s1"))
			}
			if _, _, err := first.Session("s1").Send(r.ctx, "k1", Input{Text: "ship it"}); err != nil {
				t.Fatal(err)
			}
			run()
			if _, err := alive.Session("s1").Decide(r.ctx, "d1", Decision{ID: "d1", CallID: "call_1", Action: "resume", Mode: "use-result", Payload: "yes"}); err != nil {
				t.Fatal(err)
			}
			run()
			if hits != 1 {
				t.Fatalf("the boundary was passed %d times", hits)
			}
			tr, err := alive.Session("s1").Transcript(r.ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ended []string
			for _, m := range tr {
				if m.Role == turn.RoleTool && !m.Pending {
					ended = append(ended, m.Text)
				}
			}
			if len(ended) != 1 || ended[0] != `result: ["2C snow","yes","18C grey"]` || tr[len(tr)-1].Text != "shipped" {
				t.Fatalf("transcript:\n%s", describeTranscript(tr))
			}
			if r.runs.runs["Oslo"] != 1 || r.runs.runs["Lima"] != 1 {
				t.Fatalf("tool runs %v", r.runs.runs)
			}
			for _, h := range r.models.Seen() {
				if c := r.models.Count(h.Hash); c != 1 {
					t.Errorf("model request %s made %d times", h.Summary, c)
				}
			}
		})
	}
}

// A run whose context ends right after a program's call is recorded
// returns, with the program stopped, rather than wait for a program that
// no longer runs.
func TestProgramRunStopsWithItsContext(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(programScript))
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	n := r.node("a", append(slices.Clip(programCalls.opts), withBoundary(func(name string) error {
		if name == "after-record tool call_1#0" {
			cancel()
		}
		return nil
	}))...)
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: programCalls.text}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Run(ctx); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a run whose context ended committed its turn")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not return once its context ended")
	}
	// Another run finishes the turn, the recorded call not made again.
	runUntilFree(t, r.node("b", programCalls.opts...).Session("s1"))
	if r.runs.runs["Oslo"] != 1 {
		t.Fatalf("tool runs %v", r.runs.runs)
	}
}

// A program's model calls count toward the turn's usage.
func TestProgramUsage(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(programScript))
	s := r.node("a", programCalls.opts...).Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: programCalls.text}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	if u := res[0].Outcome.Usage; u != (turn.Usage{InputTokens: 40 + 5 + 90, OutputTokens: 30 + 1 + 12}) {
		t.Fatalf("usage %+v", u)
	}
}

// builtins is the rig's tools with the built-in ones.
func builtins(t *testing.T, r *rig) *tools.Registry {
	t.Helper()
	reg := r.runs.registry(t)
	if err := builtin.Register(reg, "lash", time.Now); err != nil {
		t.Fatal(err)
	}
	return reg
}

// Saved programs: versions by content, read by name, number or sum, left
// alone by the sweeps, gone when deleted.
func TestSavedPrograms(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	c := n.Streams()
	v1, err := SaveProgram(r.ctx, c, "nightly", "result = 1\n", []string{"weather"})
	if err != nil || v1.Version != 1 {
		t.Fatalf("save: %+v, %v", v1, err)
	}
	if again, err := SaveProgram(r.ctx, c, "nightly", "result = 1\n", []string{"weather"}); err != nil || again.Version != 1 || again.Sum != v1.Sum {
		t.Fatalf("the same program again: %+v, %v", again, err)
	}
	v2, err := SaveProgram(r.ctx, c, "nightly", "result = 2\n", nil)
	if err != nil || v2.Version != 2 {
		t.Fatalf("a new version: %+v, %v", v2, err)
	}
	for _, bad := range []struct{ name, program string }{{"no spaces", "result = 1"}, {"ok", "result = ("}, {"big", strings.Repeat("#", 65<<10)}} {
		if _, err := SaveProgram(r.ctx, c, bad.name, bad.program, nil); !errors.Is(err, ErrBadInput) {
			t.Fatalf("save %q: %v", bad.name, err)
		}
	}
	for ref, want := range map[string]string{"nightly": "result = 2\n", "nightly@1": "result = 1\n", "nightly@" + v1.Sum[:8]: "result = 1\n"} {
		v, err := LoadProgram(r.ctx, c, ref)
		if err != nil || v.Program != want {
			t.Fatalf("load %s: %+v, %v", ref, v, err)
		}
	}
	if v, err := LoadProgram(r.ctx, c, "nightly@1"); err != nil || len(v.Requires) != 1 || v.Requires[0] != "weather" {
		t.Fatalf("version 1's requirements: %+v, %v", v, err)
	}
	if _, err := LoadProgram(r.ctx, c, "nightly@3"); !errors.Is(err, ErrNoProgram) {
		t.Fatalf("a version that is not: %v", err)
	}
	list, err := SavedPrograms(r.ctx, c)
	if err != nil || len(list) != 1 || list[0].Version != 2 {
		t.Fatalf("list %+v, %v", list, err)
	}
	// The sweeps keep them, whatever their age.
	if _, err := lifecycle.Sweep(r.ctx, c, lifecycle.SweepConfig{Retention: time.Minute, Grace: time.Minute, Now: func() time.Time { return time.Now().Add(time.Hour) }}); err != nil {
		t.Fatal(err)
	}
	if vs, err := SavedProgramVersions(r.ctx, c, "nightly"); err != nil || len(vs) != 2 {
		t.Fatalf("after a sweep: %+v, %v", vs, err)
	}
	if n, err := DeleteProgram(r.ctx, c, "nightly"); err != nil || n != 2 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	if _, err := LoadProgram(r.ctx, c, "nightly"); !errors.Is(err, ErrNoProgram) {
		t.Fatalf("after delete: %v", err)
	}
}

// Where the deployment signs, a version no operator saved (an object a
// client put with a program's metadata) is not listed, so never run.
func TestSavedProgramsSigned(t *testing.T) {
	r := newRig(t)
	n := r.node("a", WithSecret(testSecret))
	c := n.Streams()
	if _, err := SaveProgram(r.ctx, c, "nightly", "result = 1\n", nil); err != nil {
		t.Fatal(err)
	}
	// A client without the secret writes an object as a program's.
	forged := []byte(`{"v":1,"program":"result = 666\n"}`)
	sum := sha256.Sum256(forged)
	if err := c.PutObject(r.ctx, programOwner("nightly").Name(sum), sum, programOwner("nightly").Metadata(), forged); err != nil {
		t.Fatal(err)
	}
	vs, err := SavedProgramVersions(r.ctx, c, "nightly")
	if err != nil || len(vs) != 1 {
		t.Fatalf("versions %+v, %v", vs, err)
	}
	if v, err := LoadProgram(r.ctx, c, "nightly"); err != nil || v.Program != "result = 1\n" {
		t.Fatalf("the latest version: %+v, %v", v, err)
	}
}
