package lash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
)

// VerifyReport is what replaying a session's recorded turns through the
// current machine found.
type VerifyReport struct {
	Session string        `json:"session"`
	Turns   []TurnVerdict `json:"turns"`
}

// OK is set when no turn diverged.
func (r *VerifyReport) OK() bool {
	for _, t := range r.Turns {
		if t.Divergence != nil {
			return false
		}
	}
	return true
}

// TurnVerdict is one turn's replay.
type TurnVerdict struct {
	Turn string `json:"turn"`
	// Verdict is "ok", "diverged" or "unverifiable" (its journal is gone,
	// past the retention, or it never had one).
	Verdict    string      `json:"verdict"`
	Replayed   int         `json:"replayed"`
	Divergence *Divergence `json:"divergence,omitempty"`
	Note       string      `json:"note,omitempty"`
}

// Divergence is the first point where the current machine takes another
// path than the recorded turn.
type Divergence struct {
	Key string `json:"key"`
	// Recorded and Current are the request hashes; empty when the
	// divergence is in the outcome rather than a request.
	Recorded string `json:"recorded,omitempty"`
	Current  string `json:"current,omitempty"`
	Detail   string `json:"detail"`
	// Diff compares the recorded request with the current one, line by
	// line ("-" recorded, "+" current), when the record kept the request.
	Diff string `json:"diff,omitempty"`
}

// Verify replays the recorded turns of a session (or only turnID) through
// a machine configured with cfg, feeding each effect its journaled outcome,
// and reports where a request differs from the recorded one (a deploy of
// these settings would make replay fail with a nondeterminism error) or the
// outcome from the committed one. It performs nothing.
func (i *Inspector) Verify(ctx context.Context, cfg turn.Config, session, turnID string) (*VerifyReport, error) {
	return i.verify(ctx, &cfg, turn.Hooks{}, session, turnID)
}

// VerifyRecorded is Verify with the settings each turn recorded (its
// commit's fingerprint), with hooks for the code no fingerprint describes:
// it checks this build's machine against what ran. A turn whose settings
// cannot be read is unverifiable.
func (i *Inspector) VerifyRecorded(ctx context.Context, hooks turn.Hooks, session, turnID string) (*VerifyReport, error) {
	return i.verify(ctx, nil, hooks, session, turnID)
}

func (i *Inspector) verify(ctx context.Context, cfg *turn.Config, hooks turn.Hooks, session, turnID string) (*VerifyReport, error) {
	if _, err := i.c.Subjects().SessionEvents(session); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	rep := &VerifyReport{Session: session}
	st := newState(session)
	found := false
	// The log is folded as the driver folds it (logFolder): an entry no
	// lease could have written is passed over here too, so verify replays
	// what the driver would.
	f := logFolder{log: i.log, ceiling: i.ceiling,
		commit: func(ctx context.Context, seq uint64, e *sessionlog.Entry) (*sessionlog.TurnBody, error) {
			b, err := i.body(ctx, session, e)
			if err != nil {
				return nil, &unreadableCommit{seq: seq, turn: e.Turn, err: err}
			}
			return b, nil
		},
		consume: func(ctx context.Context, seq uint64, e *sessionlog.Entry) (*sessionlog.ConsumeBody, error) {
			if data, err := i.log.Body(ctx, session, e); err == nil {
				if b, err := sessionlog.DecodeConsumeBody(data); err == nil {
					return b, nil
				}
			}
			return nil, nil // its keys unknown, as the driver passes it over
		},
		before: func(seq uint64, e *sessionlog.Entry, body *sessionlog.TurnBody) error {
			if turnID != "" && e.Turn != turnID {
				return nil
			}
			found = true
			var v TurnVerdict
			if failedTurn(&body.Outcome) {
				v = TurnVerdict{Turn: e.Turn, Verdict: "failed", Note: "committed as failed: " + body.Outcome.Termination.String()}
			} else if tcfg, err := i.turnConfig(ctx, cfg, hooks, e); err != nil {
				v = TurnVerdict{Turn: e.Turn, Verdict: "unverifiable", Note: err.Error()}
			} else if v, err = i.verifyTurn(ctx, tcfg, session, e.Turn, st, body); err != nil {
				return err
			}
			rep.Turns = append(rep.Turns, v)
			return nil
		}}
	err := f.fold(ctx, session, st)
	var bad *unreadableCommit
	if errors.As(err, &bad) {
		// The history after it is unknown: no later turn can be replayed
		// against it.
		note := fmt.Sprintf("the commit of %s at revision %d cannot be read: %v", bad.turn, bad.seq, bad.err)
		_, _, err = i.log.ReadEntries(ctx, session, bad.seq, func(_ uint64, e *sessionlog.Entry) error {
			if e.Kind == sessionlog.KindCommit && (turnID == "" || e.Turn == turnID) {
				found = true
				rep.Turns = append(rep.Turns, TurnVerdict{Turn: e.Turn, Verdict: "unverifiable", Note: note})
			}
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	if st.rev == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSession, session)
	}
	if turnID != "" && !found {
		return nil, fmt.Errorf("%w: session %s has no committed turn %q", ErrBadInput, session, turnID)
	}
	return rep, nil
}

// unreadableCommit stops verify's fold at a commit it cannot read.
type unreadableCommit struct {
	seq  uint64
	turn string
	err  error
}

func (e *unreadableCommit) Error() string {
	return fmt.Sprintf("commit %s at %d: %v", e.turn, e.seq, e.err)
}

// turnConfig is cfg, or else the machine configuration a committed turn
// ran under, as its commit's settings fingerprint names it, with hooks.
func (i *Inspector) turnConfig(ctx context.Context, cfg *turn.Config, hooks turn.Hooks, e *sessionlog.Entry) (turn.Config, error) {
	if cfg != nil {
		return *cfg, nil
	}
	if len(e.Settings) == 0 {
		return turn.Config{}, errors.New("the commit names no turn settings; verify it with the settings it ran under")
	}
	s, err := i.Settings(ctx, hex.EncodeToString(e.Settings))
	if err != nil {
		return turn.Config{}, err
	}
	c, err := s.Config()
	c.Hooks = hooks
	return c, err
}

func (i *Inspector) verifyTurn(ctx context.Context, cfg turn.Config, session, turnID string, st *state, committed *sessionlog.TurnBody) (TurnVerdict, error) {
	v := TurnVerdict{Turn: turnID, Verdict: "ok"}
	seq, ok := turnInput(turnID)
	if !ok {
		v.Verdict, v.Note = "unverifiable", "the turn id names no input"
		return v, nil
	}
	m, err := i.log.InputAt(ctx, session, seq)
	if err != nil {
		v.Verdict, v.Note = "unverifiable", fmt.Sprintf("input %d is gone", seq)
		return v, nil
	}
	in, err := parseInput(m.Data, m.Decision)
	if err == nil && in.Text == "" && !in.Cancel {
		err = decisionsMatch(session, in.Decisions, st.suspended)
	}
	if err != nil {
		v.Verdict = "diverged"
		v.Divergence = &Divergence{Key: turnID, Detail: fmt.Sprintf("the input is refused now (%v) but was run then", err)}
		return v, nil
	}
	recs, err := i.journal.Load(ctx, session, turnID)
	if err != nil {
		return v, err
	}
	recorded := make(map[turn.ReplayKey]*effectlog.Record, len(recs))
	for _, r := range recs {
		recorded[r.Key] = r
	}
	mach, err := turn.New(cfg, turn.Start{Session: session, Turn: turnID, History: st.history, HistoryDigest: &st.digest, Suspended: st.suspended, Input: in.toTurn()})
	if err != nil {
		return v, err
	}
	// next is what the last record answered for the checkpoint after it.
	var next *answer
	var nextID turn.EffectID
	var nextAt turn.CheckpointKind
	// recordedAt returns the recorded answer at key, or a verdict.
	recordedAt := func(key turn.ReplayKey, hash turn.Hash, current string) (*answer, bool) {
		rec, ok := recorded[key]
		if !ok {
			v.Verdict, v.Note = "unverifiable", fmt.Sprintf("%s is not in the journal (past its retention?)", key)
			return nil, false
		}
		a, err := decodeAnswer(rec.Outcome.Data)
		if rec.Hash != hash {
			d := &Divergence{Key: key.String(), Recorded: rec.Hash.String(), Current: hash.String(),
				Detail: "the current machine asks another request here: replay would stop with a nondeterminism error"}
			if err == nil && a.Request != "" {
				d.Diff = lineDiff(a.Request, current)
			}
			v.Verdict, v.Divergence = "diverged", d
			return nil, false
		}
		if err != nil {
			v.Verdict, v.Note = "unverifiable", err.Error()
			return nil, false
		}
		v.Replayed++
		return a, true
	}
	var tools []turn.ToolSpec // as the turn synced them
	for {
		switch e := mach.Next().(type) {
		case *turn.Progress, *turn.Emit:
		case *turn.ExecCode:
			if _, ok := recorded[e.H.Key]; !ok {
				d, note, err := i.verifyProgram(ctx, mach, e, tools, recorded)
				switch {
				case err != nil:
					return v, err
				case d != nil:
					v.Verdict, v.Divergence = "diverged", d
					return v, nil
				case note != "":
					v.Verdict, v.Note = "unverifiable", note
					return v, nil
				}
				continue
			}
			a, ok := recordedAt(e.H.Key, e.H.Hash, renderRequest(e))
			if !ok {
				return v, nil
			}
			r, err := a.result(e.Kind(), e.H.ID)
			if err == nil {
				err = mach.Deliver(r)
			}
			if err != nil {
				return v, err
			}
		case *turn.Done:
			if d := compareOutcome(&committed.Outcome, &e.Outcome); d != "" {
				v.Verdict = "diverged"
				v.Divergence = &Divergence{Key: turnID, Detail: "the replayed outcome differs from the committed one: " + d}
			}
			return v, nil
		case *turn.ToolCalls:
			next = nil
			var cancel *string
			if rec, ok := recorded[e.H.Key]; ok {
				// A cancelled round of a journal before version 5: the
				// calls recorded before it stand.
				if a, err := decodeAnswer(rec.Outcome.Data); err == nil && a.Cancel != nil {
					cancel = a.Cancel
				}
			}
			var results []turn.ToolResult
			var last *answer // of the round's only call, when it has one
			for _, pc := range e.Calls {
				if _, ok := recorded[pc.Key]; !ok && cancel != nil {
					continue
				}
				a, ok := recordedAt(pc.Key, pc.Hash, renderCall(pc))
				if !ok {
					return v, nil
				}
				switch {
				case a.Cancel != nil:
					// A run stopped by a cancel input claimed the call.
					if cancel == nil {
						cancel = a.Cancel
					}
				case a.Result == nil:
					v.Verdict, v.Note = "unverifiable", fmt.Sprintf("%s holds no tool result", pc.Key)
					return v, nil
				default:
					results = append(results, *a.Result)
				}
				last = a
			}
			if cancel == nil && len(e.Calls) == 1 {
				next, nextID, nextAt = last.Next, e.H.ID+1, turn.AfterTools
			}
			if len(results) > 0 {
				if err := mach.Deliver(turn.ToolResults{ID: e.H.ID, Results: results}); err != nil {
					return v, err
				}
			}
			if cancel != nil {
				if err := mach.Deliver(turn.Cancel{ID: e.H.ID, Reason: *cancel}); err != nil {
					return v, err
				}
			}
		default:
			h := e.Head()
			a, ok := next, true
			next = nil
			if _, cp := e.(*turn.Checkpoint); !cp || a == nil || h.ID != nextID {
				if a, ok = recordedAt(h.Key, h.Hash, renderRequest(e)); !ok {
					return v, nil
				}
				next, nextID, nextAt = a.Next, h.ID+1, turn.BeforeFinish
			} else if want := turn.CheckpointHash(nextAt); h.Hash != want {
				v.Verdict, v.Divergence = "diverged", &Divergence{Key: h.Key.String(), Recorded: want.String(), Current: h.Hash.String(),
					Detail: "the current machine asks for another checkpoint here: replay would stop with a nondeterminism error"}
				return v, nil
			} else {
				v.Replayed++
			}
			r, err := a.result(e.Kind(), h.ID)
			if err != nil {
				return v, err
			}
			if synced, ok := r.(turn.ToolsSynced); ok {
				tools = synced.Tools
			}
			if err := mach.Deliver(r); err != nil {
				return v, err
			}
		}
	}
}

// compareOutcome says how two outcomes differ, or "".
func compareOutcome(want, got *turn.Outcome) string {
	switch {
	case want.Status != got.Status || want.Termination != got.Termination:
		return fmt.Sprintf("it ends %s (%s) instead of %s (%s)", got.Status, got.Termination, want.Status, want.Termination)
	case len(want.Messages) != len(got.Messages):
		return fmt.Sprintf("%d messages instead of %d", len(got.Messages), len(want.Messages))
	}
	for k := range want.Messages {
		if !reflect.DeepEqual(want.Messages[k], got.Messages[k]) {
			return fmt.Sprintf("message %d differs:\n%s", k, lineDiff(renderMessage(k, want.Messages[k]), renderMessage(k, got.Messages[k])))
		}
	}
	return ""
}

// renderRequest writes an effect's request as lines an operator can diff.
// A model request keeps its newest messages in full and leaves the earlier
// ones out, so a record stays small however long the session is.
func renderRequest(e turn.Effect) string {
	var r renderer
	return r.request(e)
}

// renderer renders requests, keeping the lines of the tools it rendered
// last: a run's model calls share the tools the turn synced, and a line
// takes a digest of the tool's schema.
type renderer struct {
	tools []turn.ToolSpec
	lines string
}

func (r *renderer) request(e turn.Effect) string {
	c, ok := e.(*turn.LLMCall)
	if !ok {
		return ""
	}
	req := &c.Request
	const keep = 32
	from := max(len(req.Messages)-keep, 0)
	tools := r.toolLines(req.Tools)
	var b strings.Builder
	b.Grow(64 + len(tools) + 96*(len(req.Messages)-from))
	b.WriteString("model: " + req.Model + "\n")
	s := req.Sampling
	if s.Temperature != nil || s.TopP != nil || s.MaxTokens != 0 || len(s.Stop) > 0 {
		fmt.Fprintf(&b, "sampling: temperature=%v top_p=%v max_tokens=%d stop=%q\n", deref(s.Temperature), deref(s.TopP), s.MaxTokens, s.Stop)
	}
	b.WriteString(tools)
	if from > 0 {
		// Rendering or hashing them again would cost every model call in
		// proportion to the session's length: the request hash covers them.
		fmt.Fprintf(&b, "messages 0-%d: not shown (the request hash covers them)\n", from-1)
	}
	for k := from; k < len(req.Messages); k++ {
		writeMessage(&b, k, req.Messages[k])
	}
	return b.String()
}

// toolLines renders tools a line each: one short line whatever the
// schema's size, which the digest stands for (the tools' sync record has
// them whole). The same slice as last time gets the same lines.
func (r *renderer) toolLines(tools []turn.ToolSpec) string {
	if len(tools) == 0 {
		return ""
	}
	if len(tools) == len(r.tools) && &tools[0] == &r.tools[0] {
		return r.lines
	}
	var b strings.Builder
	for _, t := range tools {
		sum := sha256.Sum256([]byte(t.Description + "\x00" + t.Schema))
		fmt.Fprintf(&b, "tool %s %x: %s\n", t.Name, sum[:6], clipLine(t.Description, 120))
	}
	r.tools, r.lines = tools, b.String()
	return r.lines
}

func deref(f *float64) any {
	if f == nil {
		return "-"
	}
	return *f
}

func renderMessage(k int, m turn.Message) string {
	var b strings.Builder
	writeMessage(&b, k, m)
	return b.String()
}

// writeMessage renders a message without fmt: it runs for every message a
// model request shows, at every model call.
func writeMessage(b *strings.Builder, k int, m turn.Message) {
	b.WriteString("message ")
	b.WriteString(strconv.Itoa(k))
	b.WriteByte(' ')
	b.WriteString(m.Role.String())
	if m.Name != "" || m.CallID != "" {
		b.WriteString(" (" + m.Name + " " + m.CallID + ")")
	}
	if m.Error {
		b.WriteString(" error")
	}
	if m.Pending {
		b.WriteString(" pending")
	}
	b.WriteString(": ")
	b.WriteString(clipLine(m.Text, 400))
	b.WriteByte('\n')
	for _, c := range m.ToolCalls {
		b.WriteString("  call " + c.ID + " " + c.Name + " ")
		b.WriteString(clipLine(c.Arguments, 400))
		b.WriteByte('\n')
	}
}

// renderCall writes a tool call's request as lines.
func renderCall(pc turn.PendingCall) string {
	s := "call " + pc.Call.ID + " " + pc.Call.Name + "\n  arguments: " + clipLine(pc.Call.Arguments, 2000) + "\n"
	if d := pc.Decision; d != nil {
		s += fmt.Sprintf("  decision %s: %s %q\n", d.ID, d.Mode, clipLine(d.Payload, 400))
	}
	return s
}

func clipLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", `\n`)
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// lineDiff is a line diff of a and b: common lines indented, removed ones
// with "-", added ones with "+". Requests are small, so the plain LCS
// table is fine.
func lineDiff(a, b string) string {
	x, y := strings.SplitAfter(a, "\n"), strings.SplitAfter(b, "\n")
	if len(x)*len(y) > 4<<20 {
		return "(too long to diff)"
	}
	lcs := make([][]int, len(x)+1)
	for k := range lcs {
		lcs[k] = make([]int, len(y)+1)
	}
	for k := len(x) - 1; k >= 0; k-- {
		for l := len(y) - 1; l >= 0; l-- {
			if x[k] == y[l] {
				lcs[k][l] = lcs[k+1][l+1] + 1
			} else {
				lcs[k][l] = max(lcs[k+1][l], lcs[k][l+1])
			}
		}
	}
	var out bytes.Buffer
	line := func(mark, s string) {
		if s == "" {
			return
		}
		out.WriteString(mark + strings.TrimSuffix(s, "\n") + "\n")
	}
	k, l := 0, 0
	for k < len(x) && l < len(y) {
		switch {
		case x[k] == y[l]:
			line("  ", x[k])
			k, l = k+1, l+1
		case lcs[k+1][l] >= lcs[k][l+1]:
			line("- ", x[k])
			k++
		default:
			line("+ ", y[l])
			l++
		}
	}
	for ; k < len(x); k++ {
		line("- ", x[k])
	}
	for ; l < len(y); l++ {
		line("+ ", y[l])
	}
	return out.String()
}
