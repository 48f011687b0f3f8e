package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// Hooks served over NATS (ADR 0038): an agent names an endpoint asked at a
// point of its turns, and what it decides is journaled as what happened
// there, so a replay reads the decision and never asks again.

// HookTimeout bounds one ask of a hook: past it the call is blocked.
const HookTimeout = 10 * time.Second

// maxHookReason bounds the reason a hook gives, which the model reads.
const maxHookReason = 1024

// HookRequest is what a before_tool hook is asked, as JSON.
type HookRequest struct {
	Hook      string `json:"hook"`
	Session   string `json:"session"`
	Turn      string `json:"turn"`
	Agent     string `json:"agent"`
	Version   string `json:"version"`
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
}

// HookAnswer is a hook's answer: verdict "allow" or "block", and the
// reason the model reads when blocked.
type HookAnswer struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
}

// beforeTool asks the agent's before_tool hook about a call: blocked with
// the result the model reads (recorded as the call's outcome), or not.
// A hook that cannot be asked, or answers nonsense, blocks: what it guards
// does not run unguarded. err is only the turn's own end.
func (d *drive) beforeTool(ctx context.Context, pc turn.PendingCall) (turn.ToolResult, bool, error) {
	name := d.p.BeforeTool
	if name == "" {
		return turn.ToolResult{}, false, nil
	}
	n := d.s.n
	block := func(format string, args ...any) (turn.ToolResult, bool, error) {
		return turn.ToolResult{CallID: pc.Call.ID, Status: turn.ToolError, Output: fmt.Sprintf(format, args...)}, true, nil
	}
	req, err := json.Marshal(HookRequest{Hook: "before_tool", Session: d.s.id, Turn: d.turn, Agent: d.p.Agent, Version: d.p.Version,
		CallID: pc.Call.ID, Tool: pc.Call.Name, Arguments: pc.Call.Arguments})
	if err != nil {
		return block("hook %s: %v", name, err)
	}
	hctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	m, err := n.nc.RequestWithContext(hctx, n.client.Subjects().Hook(name), req)
	switch {
	case ctx.Err() != nil:
		return turn.ToolResult{}, false, context.Cause(ctx)
	case errors.Is(err, nats.ErrNoResponders):
		return block("blocked: hook %s has no server", name)
	case err != nil:
		return block("blocked: hook %s did not answer: %v", name, err)
	}
	var a HookAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil || a.Verdict != "allow" && a.Verdict != "block" {
		return block("blocked: hook %s answered %.80q, not {\"verdict\": \"allow\" or \"block\"}", name, m.Data)
	}
	if a.Verdict == "allow" {
		return turn.ToolResult{}, false, nil
	}
	reason := a.Reason
	if len(reason) > maxHookReason || !utf8.ValidString(reason) {
		reason = "(a reason of " + fmt.Sprint(len(reason)) + " bytes, not shown)"
	}
	n.opts.logger.Info("tool call blocked by a hook", "session", d.s.id, "turn", d.turn, "call", pc.Call.ID, "hook", name)
	return block("blocked by hook %s: %s", name, reason)
}
