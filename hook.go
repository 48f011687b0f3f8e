package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// Hooks served over NATS (ADR 0038): an agent names endpoints asked around
// its tool calls, and what they decide is journaled as the call's outcome,
// so a replay reads the decision and never asks again.

// HookTimeout bounds one ask of a hook: past it the call is blocked.
const HookTimeout = 10 * time.Second

// maxHookReason bounds the reason a hook gives, which the model reads.
const maxHookReason = 1024

// HookRequest is what a hook is asked, as JSON: before_tool before a call
// runs, after_tool with its result (status "ok" or "error") before the
// model sees it.
type HookRequest struct {
	Hook      string `json:"hook"`
	Session   string `json:"session"`
	Turn      string `json:"turn"`
	Agent     string `json:"agent"`
	Version   string `json:"version"`
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	Status    string `json:"status,omitempty"`
	Result    string `json:"result,omitempty"`
	// Truncated: Arguments or Result hold the first MaxHookText bytes of
	// theirs.
	Truncated bool `json:"truncated,omitempty"`
}

// MaxHookText bounds the arguments and the result a hook is shown, within
// NATS's message size.
const MaxHookText = 256 << 10

// clipHook cuts s to MaxHookText bytes of valid UTF-8, saying so in cut.
func clipHook(s string, cut *bool) string {
	if len(s) <= MaxHookText {
		return s
	}
	*cut = true
	return strings.ToValidUTF8(s[:MaxHookText], "")
}

// HookAnswer is a hook's answer: verdict "allow" or "block" (and, before a
// tool, "suspend": the call waits for a person's decision), with the
// reason the model (or the person) reads.
type HookAnswer struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
}

// askHook asks hook name; a hook that cannot be asked or answers nonsense
// gives its failure as a block: what it guards never runs unguarded. err
// is only the turn's own end.
func (d *drive) askHook(ctx context.Context, name string, q HookRequest, refused ...string) (HookAnswer, error) {
	n := d.s.n
	q.Session, q.Turn, q.Agent, q.Version = d.s.id, d.turn, d.p.Agent, d.p.Version
	q.Arguments, q.Result = clipHook(q.Arguments, &q.Truncated), clipHook(q.Result, &q.Truncated)
	req, err := json.Marshal(q)
	if err != nil {
		return HookAnswer{Verdict: "block", Reason: err.Error()}, nil
	}
	hctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	m, err := n.nc.RequestWithContext(hctx, n.client.Subjects().Hook(name), req)
	switch {
	case ctx.Err() != nil:
		return HookAnswer{}, context.Cause(ctx)
	case errors.Is(err, nats.ErrNoResponders):
		return HookAnswer{Verdict: "block", Reason: "the hook has no server"}, nil
	case err != nil:
		return HookAnswer{Verdict: "block", Reason: "the hook did not answer: " + err.Error()}, nil
	}
	var a HookAnswer
	ok := json.Unmarshal(m.Data, &a) == nil
	for _, v := range refused {
		ok = ok && a.Verdict != v
	}
	if !ok || a.Verdict != "allow" && a.Verdict != "block" && a.Verdict != "suspend" {
		return HookAnswer{Verdict: "block", Reason: fmt.Sprintf("the hook answered %.80q, not a verdict it may give", m.Data)}, nil
	}
	if len(a.Reason) > maxHookReason || !utf8.ValidString(a.Reason) {
		a.Reason = fmt.Sprintf("(a reason of %d bytes, not shown)", len(a.Reason))
	}
	if a.Verdict != "allow" {
		n.opts.logger.Info("a hook stopped a tool call", "session", d.s.id, "turn", d.turn, "call", q.CallID, "hook", name, "verdict", a.Verdict)
	}
	return a, nil
}

// beforeTool asks the agent's before_tool hook about a call: its result
// when the hook blocks it (a failed call) or suspends it (parked for a
// person's decision), recorded as the call's outcome. A call a decision
// resumed is not asked about again: a person decided.
func (d *drive) beforeTool(ctx context.Context, pc turn.PendingCall) (turn.ToolResult, bool, error) {
	name := d.p.BeforeTool
	if name == "" || pc.Decision != nil {
		return turn.ToolResult{}, false, nil
	}
	a, err := d.askHook(ctx, name, HookRequest{Hook: "before_tool", CallID: pc.Call.ID, Tool: pc.Call.Name, Arguments: pc.Call.Arguments})
	switch {
	case err != nil:
		return turn.ToolResult{}, false, err
	case a.Verdict == "suspend":
		return turn.ToolResult{CallID: pc.Call.ID, Status: turn.ToolPending,
			Output: fmt.Sprintf("%s hook %s: %s", builtin.ApprovalTicket, name, a.Reason)}, true, nil
	case a.Verdict == "block":
		return turn.ToolResult{CallID: pc.Call.ID, Status: turn.ToolError, Output: fmt.Sprintf("blocked by hook %s: %s", name, a.Reason)}, true, nil
	}
	return turn.ToolResult{}, false, nil
}

// afterTool asks the agent's after_tool hook about a call's result: a
// block withholds it from the model (a failed call saying why), and the
// result recorded is what the model reads.
func (d *drive) afterTool(ctx context.Context, pc turn.PendingCall, res turn.ToolResult) (turn.ToolResult, error) {
	name := d.p.AfterTool
	if name == "" || res.Status == turn.ToolPending {
		return res, nil
	}
	status := "ok"
	if res.Status == turn.ToolError {
		status = "error"
	}
	a, err := d.askHook(ctx, name, HookRequest{Hook: "after_tool", CallID: pc.Call.ID, Tool: pc.Call.Name, Arguments: pc.Call.Arguments,
		Status: status, Result: res.Output}, "suspend")
	if err != nil || a.Verdict == "allow" {
		return res, err
	}
	return turn.ToolResult{CallID: pc.Call.ID, Status: turn.ToolError, Output: fmt.Sprintf("result withheld by hook %s: %s", name, a.Reason)}, nil
}
