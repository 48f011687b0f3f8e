package lash

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
)

// Verify replays committed turns through the current machine: the same
// configuration replays clean; a changed system prompt diverges at the
// first model call, with the recorded and current requests diffed.
func TestVerify(t *testing.T) {
	r := newRig(t)
	n := r.node("one")
	if _, err := n.Session("s1").Turn("k1", Input{Text: "weather?"}).Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Session("s1").Turn("k2", Input{Text: "again?"}).Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	in := NewInspector(n.Streams())
	cfg := turn.Config{Model: "scripted", System: "You are a weather agent."}
	rep, err := in.Verify(r.ctx, cfg, "s1", "")
	if err != nil || !rep.OK() || len(rep.Turns) != 2 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	// sync tools, model, three calls, checkpoint, model...; then sync
	// tools, model, checkpoint.
	if v := rep.Turns[0]; v.Verdict != "ok" || v.Replayed < 7 {
		t.Fatalf("turn %+v", v)
	}
	if v := rep.Turns[1]; v.Verdict != "ok" || v.Replayed < 2 {
		t.Fatalf("turn %+v", v)
	}

	cfg.System = "You are a travel agent."
	rep, err = in.Verify(r.ctx, cfg, "s1", rep.Turns[1].Turn)
	if err != nil || rep.OK() || len(rep.Turns) != 1 {
		t.Fatalf("verify with another prompt: %+v, %v", rep, err)
	}
	d := rep.Turns[0].Divergence
	if !strings.Contains(d.Key, "llm-call") || d.Recorded == d.Current ||
		!strings.Contains(d.Diff, "- message 0 system: You are a weather agent.") ||
		!strings.Contains(d.Diff, "+ message 0 system: You are a travel agent.") {
		t.Fatalf("divergence %+v", d)
	}
	// With the settings each turn recorded, a verifier needs none: the
	// node's model name and prompt come from the object store.
	rep, err = in.VerifyRecorded(r.ctx, turn.Hooks{}, "s1", "")
	if err != nil || !rep.OK() || len(rep.Turns) != 2 || rep.Turns[0].Verdict != "ok" || rep.Turns[1].Replayed < 2 {
		t.Fatalf("verify with the recorded settings: %+v, %v", rep, err)
	}
	if _, err := in.Verify(r.ctx, cfg, "nobody", ""); err == nil {
		t.Fatal("verify of an unknown session")
	}
	if _, err := in.Verify(r.ctx, cfg, "s1", "in-999"); err == nil {
		t.Fatal("verify of an unknown turn")
	}
}

// The journal of a turn crashed once and finished by another node shows
// which effects the committing run replayed and which it executed.
func TestInspectorJournal(t *testing.T) {
	r := newRig(t)
	crashAt(t, r, "after-record tool call_3")
	second := r.node("second")
	res := runUntilFree(t, second.Session("s1"))
	if len(res) != 1 {
		t.Fatalf("runs %+v", res)
	}
	js, err := NewInspector(second.Streams()).Journal(r.ctx, "s1", res[0].Turn)
	if err != nil {
		t.Fatal(err)
	}
	replayed, executed := 0, 0
	for _, j := range js {
		switch {
		case j.Replayed && j.Recorder == "first":
			replayed++
		case j.Executed && j.Recorder == "second":
			executed++
		default:
			t.Errorf("entry %+v", j)
		}
		if j.Summary == "" {
			t.Errorf("entry without a summary %+v", j)
		}
	}
	if replayed != res[0].Replayed || executed != res[0].Executed || replayed == 0 || executed == 0 {
		t.Fatalf("journal shows %d replayed, %d executed; the run says %d, %d", replayed, executed, res[0].Replayed, res[0].Executed)
	}
	turns, err := NewInspector(second.Streams()).Turns(r.ctx, "s1")
	if err != nil || len(turns) != 1 || !strings.HasPrefix(turns[0].Committer, "second/") || turns[0].Duration <= 0 {
		t.Fatalf("turns %+v, %v", turns, err)
	}
}

// Every model answer's record carries its request as lines: a tool there
// is one short line whatever its schema's size, and a change of schema
// still shows as a changed line.
func TestRenderedToolsBounded(t *testing.T) {
	big := `{"type":"object","description":"` + strings.Repeat("x", 200<<10) + `"}`
	call := func(schema string) string {
		var tools []turn.ToolSpec
		for i := range 50 {
			tools = append(tools, turn.ToolSpec{Name: fmt.Sprint("tool", i), Description: strings.Repeat("d", 4<<10), Schema: schema})
		}
		return renderRequest(&turn.LLMCall{Request: turn.ModelRequest{Model: "m", Tools: tools,
			Messages: []turn.Message{{Role: turn.RoleUser, Text: "hi"}}}})
	}
	a, b := call(big), call(big+" ")
	if len(a) > 50*200+200 {
		t.Fatalf("50 tools rendered in %d bytes", len(a))
	}
	if d := lineDiff(a, b); strings.Count(d, "\n-") != 50 || strings.Count(d, "\n+") != 50 {
		t.Fatalf("a schema change shows as %q", d[:min(len(d), 400)])
	}
}

// A commit no lease could have written (its token above every lease's) is
// passed over by verify as by the driver: the turns after it replay
// against the history the driver ran them on, and verify to ok.
func TestVerifyFoldsAsTheDriverDoes(t *testing.T) {
	r := newRig(t)
	n := r.node("one")
	s := n.Session("s1")
	if _, err := s.Turn("k1", Input{Text: "weather?"}).Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	hostile, err := streams.Open(r.ctx, r.conn(), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lg := sessionlog.New(hostile)
	pos, err := lg.Fence(r.ctx, "s1", 999999, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	body, err := sessionlog.EncodeTurnBody(&sessionlog.TurnBody{Outcome: turn.Outcome{Status: turn.StatusDone,
		Messages: []turn.Message{{Role: turn.RoleUser, Text: "forged"}, {Role: turn.RoleAssistant, Text: "forged answer"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Commit(r.ctx, pos, "in-999", body); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Turn("k2", Input{Text: "again?"}).Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := NewInspector(n.Streams()).Verify(r.ctx, turn.Config{Model: "scripted", System: "You are a weather agent."}, "s1", "")
	if err != nil || !rep.OK() || len(rep.Turns) != 2 {
		t.Fatalf("verify past a forged commit: %+v, %v", rep, err)
	}
	for _, v := range rep.Turns {
		if v.Turn == "in-999" {
			t.Fatalf("verify replayed the forged commit: %+v", rep.Turns)
		}
	}
}
