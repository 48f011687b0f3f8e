package lash

import (
	"strings"
	"testing"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
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
