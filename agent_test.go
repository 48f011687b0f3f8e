package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/provider/anthropic"
	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

const agentScript = `
rule support-call
  when system contains support desk
  when tools = 0
  call weather {"city":"Oslo"}

rule support
  when system contains support desk
  say support answered

rule research
  when system contains researcher
  say research answered

rule one-call
  when system contains Version one
  when tools = 0
  call weather {"city":"Lima"}

rule one
  when system contains Version one
  say one answered

rule two
  when system contains Version two
  say two answered

rule lead-refused
  when system contains You lead
  when tools = 0
  call spawn_agent {"task":"go rogue","agent":"rogue"}

rule lead-spawn
  when system contains You lead
  when tools = 1
  call spawn_agent {"task":"summarize the logs","agent":"helper","name":"h"}

rule lead-await
  when system contains You lead
  when tools = 2
  call process_await {"process":"h"}

rule lead-done
  when system contains You lead
  say lead done

rule helper
  when system contains You help
  say helped with the logs

rule spawner-call
  when system contains Spawner
  when tools = 0
  call spawn_agent {"task":"look outside","tools":["weather"]}
  call process_start {"tool":"weather","args":{"city":"Oslo"}}

rule spawner
  when system contains Spawner
  say spawned
`

// crashMidTurn begins session u's first turn under version one of agent v
// (OpenAI's API) on a node that applies next once the turn's tool call is
// recorded and crashes there. It returns the providers for the node that
// finishes the turn, and version one's record.
func crashMidTurn(t *testing.T, r *rig, next *agents.Definition) (map[string]Model, *agents.Record) {
	t.Helper()
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	providers := providersOf(t, models, "openai")
	crashed := false
	var a *Node
	a = r.node("a", WithProviders(providers), withBoundary(func(name string) error {
		if strings.HasPrefix(name, "after-record tool ") && !crashed {
			crashed = true
			applyAgent(t, a, next)
			return errCrash
		}
		return nil
	}))
	v1 := applyAgent(t, a, &agents.Definition{Name: "v", Instructions: "Version one.", Provider: "openai", Model: "m", Tools: []string{"weather"}})
	if _, _, err := a.Session("u").Send(r.ctx, "k1", Input{Text: "go", Agent: "v"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Session("u").Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run: %v, want the crash", err)
	}
	return providers, v1
}

// providersOf are the providers of a node: OpenAI's and Anthropic's APIs,
// both spoken by the test model server s.
func providersOf(t *testing.T, s *testenv.ModelServer, kinds ...string) map[string]Model {
	t.Helper()
	out := map[string]Model{}
	for _, k := range kinds {
		var m Model
		var err error
		if k == "anthropic" {
			m, err = anthropic.New(anthropic.Config{BaseURL: s.AnthropicURL(), Timeout: 10 * time.Second})
		} else {
			m, err = openai.New(openai.Config{BaseURL: s.URL(), Timeout: 10 * time.Second})
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = m
	}
	return out
}

func applyAgent(t *testing.T, n *Node, d *agents.Definition) *agents.Record {
	t.Helper()
	r, _, err := agents.New(n.Streams(), "test").Apply(context.Background(), d, -1)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func systemOf(req turn.ModelRequest) string {
	for _, m := range req.Messages {
		if m.Role == turn.RoleSystem {
			return m.Text
		}
	}
	return ""
}

func toolNames(req turn.ModelRequest) []string {
	var out []string
	for _, s := range req.Tools {
		out = append(out, s.Name)
	}
	return out
}

func answerOf(t *testing.T, res []TurnResult) string {
	t.Helper()
	if len(res) == 0 {
		t.Fatal("no turn ran")
	}
	msgs := res[len(res)-1].Outcome.Messages
	return msgs[len(msgs)-1].Text
}

// One node serves two agents on two providers beside its default agent:
// each model request carries its agent's instructions, model and tools
// only, and a session keeps its agent from turn to turn.
func TestAgentsShareANode(t *testing.T) {
	r := newRig(t)
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	n := r.node("a", WithProviders(providersOf(t, models, "openai", "anthropic")))
	applyAgent(t, n, &agents.Definition{Name: "support", Instructions: "You are the support desk.", Provider: "openai",
		Model: "gpt-support", Tools: []string{"weather"}})
	applyAgent(t, n, &agents.Definition{Name: "research", Instructions: "You are a researcher.", Provider: "anthropic",
		Model: "claude-research"})
	sends := map[string]Input{"s1": {Text: "help me", Agent: "support"}, "s2": {Text: "dig into it", Agent: "research"},
		"s3": {Text: "Weather in Oslo, Lima and Pune?"}}
	answers := map[string]string{"s1": "support answered", "s2": "research answered", "s3": "Oslo is cold, Lima is grey, Pune is hot."}
	var wg sync.WaitGroup
	for id, in := range sends {
		if _, _, err := n.Session(id).Send(r.ctx, "k1", in); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			res := runUntilFree(t, n.Session(id))
			if got := answerOf(t, res); got != answers[id] {
				t.Errorf("%s answered %q, want %q", id, got, answers[id])
			}
		})
	}
	wg.Wait()
	// The next turn names no agent and runs the session's.
	if _, _, err := n.Session("s2").Send(r.ctx, "k2", Input{Text: "and more"}); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(t, runUntilFree(t, n.Session("s2"))); got != "research answered" {
		t.Fatalf("s2's second turn answered %q", got)
	}
	byModel := map[string]int{}
	for _, rec := range models.Seen() {
		req := rec.Request
		byModel[req.Model]++
		switch req.Model {
		case "gpt-support":
			if systemOf(req) != "You are the support desk." || !slices.Equal(toolNames(req), []string{"weather"}) {
				t.Errorf("a support request with system %q and tools %v", systemOf(req), toolNames(req))
			}
		case "claude-research":
			if systemOf(req) != "You are a researcher." || len(req.Tools) != 0 {
				t.Errorf("a research request with system %q and tools %v", systemOf(req), toolNames(req))
			}
		default:
			t.Errorf("a request for model %q reached the agents' server", req.Model)
		}
	}
	if byModel["gpt-support"] != 2 || byModel["claude-research"] != 2 {
		t.Fatalf("requests by model %v; want 2 each", byModel)
	}
	for _, rec := range r.models.Seen() {
		if systemOf(rec.Request) != "You are a weather agent." || rec.Request.Model != "scripted" {
			t.Errorf("a default-agent request with system %q, model %q", systemOf(rec.Request), rec.Request.Model)
		}
	}
	if r.models.Requests() != 2 {
		t.Fatalf("%d requests of the default agent, want 2", r.models.Requests())
	}
}

// A turn runs under the agent version it began with, to its commit, also
// when another node finishes it after a crash and the agent changed in
// between; the next turn takes the new version, and a pinned session
// stays on its own. verify replays every turn under its recorded settings.
func TestAgentUpdatedMidTurn(t *testing.T) {
	r := newRig(t)
	providers, v1 := crashMidTurn(t, r, &agents.Definition{Name: "v", Instructions: "Version two.", Provider: "openai", Model: "m"})
	b := r.node("b", WithProviders(providers))
	if got := answerOf(t, runUntilFree(t, b.Session("u"))); got != "one answered" {
		t.Fatalf("the turn begun under version one answered %q", got)
	}
	if r.runs.runs["Lima"] != 1 {
		t.Fatalf("the recorded tool ran %d times", r.runs.runs["Lima"])
	}
	if _, _, err := b.Session("u").Send(r.ctx, "k2", Input{Text: "again"}); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(t, runUntilFree(t, b.Session("u"))); got != "two answered" {
		t.Fatalf("the next turn answered %q, want version two's", got)
	}
	// Pinned to revision 1: version one, whatever the agent is now.
	if _, _, err := b.Session("p").Send(r.ctx, "k1", Input{Text: "go", Agent: fmt.Sprintf("v@%d", v1.Revision)}); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(t, runUntilFree(t, b.Session("p"))); got != "one answered" {
		t.Fatalf("the pinned session answered %q", got)
	}
	if _, _, err := b.Session("p").Send(r.ctx, "k2", Input{Text: "still"}); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(t, runUntilFree(t, b.Session("p"))); got != "one answered" {
		t.Fatalf("the pinned session's next turn answered %q", got)
	}
	rep, err := NewInspector(b.Streams()).VerifyRecorded(r.ctx, turn.Hooks{}, "u", "")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Turns) != 2 {
		t.Fatalf("verify: %+v", rep)
	}
}

// An agent whose provider no node has fails its turns, recorded and once;
// another agent's sessions on the same node go on. A send naming no agent
// there is, or a name past the bound, is refused and appends nothing.
func TestAgentWithoutProvider(t *testing.T) {
	r := newRig(t)
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	n := r.node("a", WithProviders(providersOf(t, models, "openai")))
	applyAgent(t, n, &agents.Definition{Name: "far", Instructions: "You are a researcher.", Provider: "anthropic", Model: "c"})
	applyAgent(t, n, &agents.Definition{Name: "support", Instructions: "You are the support desk.", Provider: "openai", Model: "g",
		Tools: []string{"weather"}})
	if _, _, err := n.Session("f").Send(r.ctx, "k1", Input{Text: "hi", Agent: "far"}); err != nil {
		t.Fatal(err)
	}
	res := runUntilFree(t, n.Session("f"))
	if len(res) != 1 || res[0].Outcome.Termination.Code != FailNoProvider {
		t.Fatalf("turns %+v, want one failed with %s", res, FailNoProvider)
	}
	if _, _, err := n.Session("s").Send(r.ctx, "k1", Input{Text: "help", Agent: "support"}); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(t, runUntilFree(t, n.Session("s"))); got != "support answered" {
		t.Fatalf("support answered %q", got)
	}
	for _, name := range []string{"nosuch", strings.Repeat("a", agents.MaxNameBytes+1), "far@zz"} {
		_, _, err := n.Session("x").Send(r.ctx, "k1", Input{Text: "hi", Agent: name})
		if !errors.Is(err, ErrBadInput) {
			t.Fatalf("send naming agent %.20q: %v, want a bad input", name, err)
		}
	}
	if _, err := n.log.InputAfter(r.ctx, "x", 0); err == nil {
		t.Fatal("a refused send appended an input")
	}
	// A session keeps its agent: an input naming another is refused.
	if _, _, err := n.Session("s").Send(r.ctx, "k2", Input{Text: "switch", Agent: "far"}); err != nil {
		t.Fatal(err)
	}
	if res := runUntilFree(t, n.Session("s")); len(res) != 0 {
		t.Fatalf("an input moving the session to another agent ran a turn: %+v", res)
	}
	st, err := n.Session("s").load(r.ctx)
	if err != nil || st.agent != "support" || st.turns != 1 {
		t.Fatalf("session s: agent %q, %d turns, %v", st.agent, st.turns, err)
	}
}

// An agent's turn cannot hand a sub-agent a tool its allowlist leaves out,
// nor run one in the background.
func TestAgentGivesNoToolBeyondItsOwn(t *testing.T) {
	r := newRig(t)
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	reg := r.runs.registry(t)
	n := r.node("a", WithTools(reg), WithProviders(providersOf(t, models, "openai")))
	for _, tool := range n.ProcessTools() {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	applyAgent(t, n, &agents.Definition{Name: "spawner", Instructions: "Spawner.", Provider: "openai", Model: "g",
		Tools: []string{"spawn_agent", "process_start"}})
	if _, _, err := n.Session("sp").Send(r.ctx, "k1", Input{Text: "go", Agent: "spawner"}); err != nil {
		t.Fatal(err)
	}
	res := runUntilFree(t, n.Session("sp"))
	if answerOf(t, res) != "spawned" {
		t.Fatalf("answered %q", answerOf(t, res))
	}
	var refused, background bool
	for _, m := range res[0].Outcome.Messages {
		refused = refused || m.Role == turn.RoleTool && strings.Contains(m.Text, `tool "weather" is not yours to give`)
		background = background || m.Role == turn.RoleTool && strings.Contains(m.Text, `no tool "weather" can run in the background: it is not yours`)
	}
	if !refused || !background {
		t.Fatalf("spawn_agent gave a tool the agent does not have: %s", describeTranscript(res[0].Outcome.Messages))
	}
}

// spawn_agent starts a sub-agent under an agent the caller's definition
// names (and refuses one it does not): the sub-agent's session runs that
// agent, whose instructions reach the model.
func TestSubAgentUnderNamedAgent(t *testing.T) {
	r := newRig(t)
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	reg := r.runs.registry(t)
	n := r.node("a", WithTools(reg), WithProviders(providersOf(t, models, "openai")), WithProjection(t.TempDir()))
	for _, tool := range n.ProcessTools() {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	applyAgent(t, n, &agents.Definition{Name: "lead", Instructions: "You lead.", Provider: "openai", Model: "g",
		Tools: []string{"spawn_agent", "process_await"}, SubAgents: agents.SubAgents{Agents: []string{"helper"}, MaxDepth: 1}})
	applyAgent(t, n, &agents.Definition{Name: "helper", Instructions: "You help.", Provider: "openai", Model: "h"})
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 3)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	go func() { _ = n.RunProcesses(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })
	if _, _, err := n.Session("boss").Send(ctx, "k1", Input{Text: "get help", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
	tr := waitForAnswer(t, n.Session("boss"), "lead done")
	var refused, helped bool
	for _, m := range tr {
		refused = refused || m.Role == turn.RoleTool && strings.Contains(m.Text, `agent "rogue" is not one you may start`)
		helped = helped || m.Role == turn.RoleTool && m.Text == "helped with the logs"
	}
	if !refused || !helped {
		t.Fatalf("refused %v, helped %v: %s", refused, helped, describeTranscript(tr))
	}
	var asked bool
	for _, rec := range models.Seen() {
		asked = asked || rec.Request.Model == "h" && systemOf(rec.Request) == "You help."
	}
	if !asked {
		t.Fatal("no request under the helper agent")
	}
}

// A turn under a named agent sends what a turn under the default agent
// sends: the agent comes from the node's index, not a read per turn.
func TestAgentTurnCostsNoRoundTrip(t *testing.T) {
	r := newRig(t)
	// The agent asks the default agent's model server: the same turns.
	n := r.node("a", WithProviders(providersOf(t, r.models, "openai")))
	applyAgent(t, n, &agents.Definition{Name: "support", Instructions: "You are the support desk.", Provider: "openai", Model: "g",
		Tools: []string{"weather"}})
	// The fewest messages of a few turns of each: a lease renewal or a
	// liveness beat may fall into one.
	sent := func(agent string) uint64 {
		least := uint64(1 << 62)
		for i := range 4 {
			s := n.Session(fmt.Sprintf("c-%s-%d", agent, i))
			if _, _, err := s.Send(r.ctx, "k", Input{Text: "Weather in Oslo, Lima and Pune?", Agent: agent}); err != nil {
				t.Fatal(err)
			}
			before := n.nc.Stats().OutMsgs
			if res, err := s.Run(r.ctx); err != nil || len(res) != 1 || res[0].Executed == 0 {
				t.Fatalf("turn: %+v, %v", res, err)
			}
			if i > 0 { // the first makes the agent's profile
				least = min(least, n.nc.Stats().OutMsgs-before)
			}
		}
		return least
	}
	plain, named := sent(""), sent("support")
	if named != plain {
		t.Fatalf("a turn under the agent sent %d messages, under the default agent %d", named, plain)
	}
}

// serveHook answers the hook name on its subject with answer; it returns
// what the hook was asked so far.
func serveHook(t *testing.T, r *rig, name, answer string) func() []HookRequest {
	t.Helper()
	nc := r.conn()
	var mu sync.Mutex
	var asked []HookRequest
	if _, err := nc.Subscribe("lash.hook."+name, func(m *nats.Msg) {
		var req HookRequest
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		asked = append(asked, req)
		mu.Unlock()
		_ = m.Respond([]byte(answer))
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []HookRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
}

// An agent's before_tool hook, served over NATS, blocks a tool call: the
// block is the call's recorded outcome, so the node that finishes the turn
// after a crash replays it and does not ask the hook again; the tool never
// runs.
func TestHookBlocksToolCall(t *testing.T) {
	r := newRig(t)
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	guard := serveHook(t, r, "guard", `{"verdict":"block","reason":"not today"}`)
	crashed := false
	a := r.node("a", WithProviders(providersOf(t, models, "openai")), withBoundary(func(name string) error {
		if strings.HasPrefix(name, "after-record tool ") && !crashed {
			crashed = true
			return errCrash
		}
		return nil
	}))
	applyAgent(t, a, &agents.Definition{Name: "support", Instructions: "You are the support desk.", Provider: "openai", Model: "g",
		Tools: []string{"weather"}, Hooks: agents.Hooks{BeforeTool: "guard"}})
	if _, _, err := a.Session("h").Send(r.ctx, "k1", Input{Text: "help", Agent: "support"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Session("h").Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run: %v, want the crash", err)
	}
	b := r.node("b", WithProviders(providersOf(t, models, "openai")))
	res := runUntilFree(t, b.Session("h"))
	if got := answerOf(t, res); got != "support answered" {
		t.Fatalf("answered %q", got)
	}
	var blocked bool
	for _, m := range res[0].Outcome.Messages {
		blocked = blocked || m.Role == turn.RoleTool && m.Text == "blocked by hook guard: not today"
	}
	asked := guard()
	if !blocked || len(asked) != 1 || r.runs.runs["Oslo"] != 0 {
		t.Fatalf("blocked %v, hook asked %d times, tool ran %v: %s", blocked, len(asked), r.runs.runs, describeTranscript(res[0].Outcome.Messages))
	}
	if q := asked[0]; q.Tool != "weather" || q.Agent != "support" || q.Session != "h" || q.Arguments != `{"city":"Oslo"}` {
		t.Fatalf("the hook was asked %+v", q)
	}
}

// A session's labels come with its first message and stay; a later
// message giving labels is refused.
func TestSessionLabels(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	s := n.Session("l")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?", Labels: map[string]string{"team": "care", "a.b/c": ""}}); err != nil {
		t.Fatal(err)
	}
	runUntilFree(t, s)
	if _, _, err := s.Send(r.ctx, "k2", Input{Text: "more", Labels: map[string]string{"team": "other"}}); err != nil {
		t.Fatal(err)
	}
	if res := runUntilFree(t, s); len(res) != 0 {
		t.Fatalf("a later message with labels ran a turn: %+v", res)
	}
	if _, _, err := s.Send(r.ctx, "k3", Input{Text: "x", Labels: map[string]string{"bad key": "v"}}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("a bad label key: %v", err)
	}
	turns, err := NewInspector(n.Streams()).Turns(r.ctx, "l")
	if err != nil || len(turns) != 1 {
		t.Fatalf("turns %+v, %v", turns, err)
	}
	p := caughtUp(t, OpenProjection, n.Streams())
	h, err := p.Session("l")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := h.Label("team"); !ok || v != "care" || len(h.Labels) != 2 || h.Labels[0].Key != "a.b/c" {
		t.Fatalf("labels %+v", h.Labels)
	}
}

// A node without an agent's provider leaves its sessions to a live node
// that has it, which runs them.
func TestAgentLeftToANodeWithItsProvider(t *testing.T) {
	r := newRig(t)
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	a := r.node("a", WithProviders(providersOf(t, models, "openai")))
	b := r.node("b", WithProviders(providersOf(t, models, "anthropic")))
	applyAgent(t, a, &agents.Definition{Name: "research", Instructions: "You are a researcher.", Provider: "anthropic", Model: "c"})
	if _, _, err := a.Session("r").Send(r.ctx, "k1", Input{Text: "dig", Agent: "research"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Session("r").Run(r.ctx); !errors.Is(err, ErrSettingsMismatch) {
		t.Fatalf("node a's run: %v, want the session left to a node with the provider", err)
	}
	if got := answerOf(t, runUntilFree(t, b.Session("r"))); got != "research answered" {
		t.Fatalf("node b answered %q", got)
	}
}

// A before_tool hook that suspends parks the call for a person; the
// decision that resumes it is not put to the hook again; an after_tool
// hook withholds the result from the model.
func TestHooksSuspendAndWithhold(t *testing.T) {
	r := newRig(t)
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	gate := serveHook(t, r, "gate", `{"verdict":"suspend","reason":"a person must look"}`)
	filter := serveHook(t, r, "filter", `{"verdict":"block","reason":"secret"}`)
	n := r.node("a", WithProviders(providersOf(t, models, "openai")))
	applyAgent(t, n, &agents.Definition{Name: "support", Instructions: "You are the support desk.", Provider: "openai", Model: "g",
		Tools: []string{"weather"}, Hooks: agents.Hooks{BeforeTool: "gate", AfterTool: "filter"}})
	s := n.Session("g")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "help", Agent: "support"}); err != nil {
		t.Fatal(err)
	}
	res := runUntilFree(t, s)
	if len(res) != 1 || len(res[0].Outcome.Suspended) != 1 || !strings.Contains(res[0].Outcome.Suspended[0].Ticket.Reason, "hook gate: a person must look") {
		t.Fatalf("the gate did not suspend the call: %+v", res)
	}
	call := res[0].Outcome.Suspended[0].Call.ID
	if _, _, err := s.Send(r.ctx, "d1", Input{Decisions: []Decision{{ID: "d1", CallID: call, Action: "resume"}}}); err != nil {
		t.Fatal(err)
	}
	res = runUntilFree(t, s)
	if got := answerOf(t, res); got != "support answered" {
		t.Fatalf("answered %q", got)
	}
	var withheld bool
	for _, m := range res[0].Outcome.Messages {
		withheld = withheld || m.Role == turn.RoleTool && m.Text == "result withheld by hook filter: secret"
	}
	if !withheld || len(gate()) != 1 || len(filter()) != 1 || r.runs.runs["Oslo"] != 1 {
		t.Fatalf("withheld %v, gate asked %d times, filter %d, tool runs %v: %s", withheld, len(gate()), len(filter()), r.runs.runs,
			describeTranscript(res[0].Outcome.Messages))
	}
}

// A turn begun under a version on a provider the node has ends under it,
// even when the agent's current version is on a provider the node lacks:
// the journal decides before the provider does.
func TestAgentMovedToAnotherProviderMidTurn(t *testing.T) {
	r := newRig(t)
	providers, _ := crashMidTurn(t, r, &agents.Definition{Name: "v", Instructions: "Version two.", Provider: "anthropic", Model: "m"})
	b := r.node("b", WithProviders(providers))
	if got := answerOf(t, runUntilFree(t, b.Session("u"))); got != "one answered" {
		t.Fatalf("answered %q", got)
	}
	// The next turn is version two's, on a provider no node has: failed.
	if _, _, err := b.Session("u").Send(r.ctx, "k2", Input{Text: "again"}); err != nil {
		t.Fatal(err)
	}
	if res := runUntilFree(t, b.Session("u")); len(res) != 1 || res[0].Outcome.Termination.Code != FailNoProvider {
		t.Fatalf("the next turn: %+v", res)
	}
}
