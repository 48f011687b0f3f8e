package lash

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/codemode"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/turn"
)

// A program (turn.ExecCode) runs in a sandbox (package codemode) while the
// drive loop answers its calls: each call it makes goes to the machine as
// an ExecResult, comes back as a ProgramCalls effect journaled call by
// call, and its outcomes go back to the program with the next ExecCode.
// The program keeps running between its effects. After a crash it runs
// again from its start: its recorded calls answer from the journal (or
// from the machine's Known), a call that was running is made again, in
// doubt, and the rest run. Its end is journaled under its origin key, so a
// replay of a finished program does not run it.

// programEnd is a program's end as its record keeps it.
type programEnd struct {
	Output string `msgpack:"o,omitempty"`
	Failed bool   `msgpack:"f,omitempty"`
}

// programs runs the node's programs: in a sandbox process (started on the
// first program), or in-process (WithInProcessPrograms).
type programs struct {
	inProcess bool
	sandbox   codemode.Sandbox
}

func (p *programs) run(ctx context.Context, src string, tools []codemode.Tool, host codemode.Host, lim codemode.Limits) (codemode.Result, error) {
	if p.inProcess {
		return codemode.Run(ctx, src, tools, host, lim)
	}
	return p.sandbox.Run(ctx, src, tools, host, lim)
}

// WithInProcessPrograms runs the model's programs in the node's process
// instead of a sandbox process. The interpreter bounds their steps, calls
// and output, but not their memory: only for programs that are trusted,
// or for binaries that cannot call codemode.ServeChild first thing.
func WithInProcessPrograms() Option { return func(o *options) { o.inProcessPrograms = true } }

// programSpec is the ProgramTool offered to the model, describing the
// tools its programs may call.
func programSpec(specs []turn.ToolSpec) turn.ToolSpec {
	desc := codemode.Guide + "\n\nThe functions:\n\n" + codemode.Describe(codeTools(specs))
	return turn.ToolSpec{Name: turn.ProgramTool, Description: desc,
		Schema: `{"type":"object","properties":{"program":{"type":"string","description":"the Starlark program"}},"required":["program"]}`}
}

// codeTools are the tools a program may call: the catalog without the
// program tool.
func codeTools(specs []turn.ToolSpec) []codemode.Tool {
	out := make([]codemode.Tool, 0, len(specs))
	for _, s := range specs {
		if s.Name != turn.ProgramTool {
			out = append(out, codemode.Tool{Name: s.Name, Description: s.Description, Schema: json.RawMessage(s.Schema)})
		}
	}
	return out
}

// offerPrograms adds the program tool to a catalog offered in a mode that
// runs programs, in place of any tool of the same name.
func offerPrograms(mode turn.Mode, specs []turn.ToolSpec) []turn.ToolSpec {
	if mode == turn.ModeTools {
		return specs
	}
	out := make([]turn.ToolSpec, 0, len(specs)+1)
	for _, s := range specs {
		if s.Name != turn.ProgramTool {
			out = append(out, s)
		}
	}
	return append(out, programSpec(out))
}

// progRun is one run of a program, alive between its effects.
type progRun struct {
	origin turn.ReplayKey
	// from and to are the ordinals of the batch of calls it waits on the
	// outcomes of (to is past the last); none when from == to.
	from, to int
	calls    chan []codemode.Call
	outs     chan []codemode.Outcome
	end      chan progResult
	cancel   context.CancelFunc
	done     chan struct{}
}

type progResult struct {
	res codemode.Result
	err error
}

// progHost is a run's host: calls the machine knows the outcomes of (a
// resumed program's, or all of them when the run started again in the
// middle of the program's effects) answer from them; the others go to the
// drive loop, whose effects answer them from the journal or make them.
type progHost struct {
	r     *progRun
	known []turn.ProgramChild
}

func (h *progHost) Do(ctx context.Context, calls []codemode.Call) ([]codemode.Outcome, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	if last := calls[len(calls)-1].Ordinal; last < len(h.known) {
		outs := make([]codemode.Outcome, len(calls))
		for i, c := range calls {
			if pc := programCall(c); !sameCall(h.known[c.Ordinal].Call, pc) {
				return nil, &effectlog.NondeterminismError{Key: turn.ChildKey(h.r.origin, c.Ordinal),
					Recorded: turn.ChildHash(h.known[c.Ordinal].Call), Current: turn.ChildHash(pc)}
			}
			outs[i] = codeOutcome(*h.known[c.Ordinal].Outcome)
		}
		return outs, nil
	}
	// New calls, or a batch the program waited on before a park: the
	// machine takes them.
	select {
	case h.r.calls <- calls:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	select {
	case outs := <-h.r.outs:
		return outs, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func sameCall(a, b turn.ProgramCall) bool {
	return a.Ordinal == b.Ordinal && a.Kind == b.Kind && a.Tool == b.Tool && a.Args == b.Args
}

func programCall(c codemode.Call) turn.ProgramCall {
	k := turn.ChildTool
	switch c.Kind {
	case codemode.KindModel:
		k = turn.ChildModel
	case codemode.KindSleep:
		k = turn.ChildSleep
	}
	return turn.ProgramCall{Ordinal: c.Ordinal, Kind: k, Tool: c.Tool, Args: string(c.Args)}
}

func codeOutcome(o turn.ProgramOutcome) codemode.Outcome {
	switch o.Status {
	case turn.ChildOK:
		return codemode.Outcome{Value: json.RawMessage(o.Value)}
	case turn.ChildCancelled:
		return codemode.Outcome{Cancelled: true}
	}
	return codemode.Outcome{Error: o.Error}
}

func (r *progRun) stop() {
	r.cancel()
	<-r.done
}

// stopProgram ends the program running between effects, if any.
func (d *drive) stopProgram() {
	if d.prog != nil {
		d.prog.stop()
		d.prog = nil
	}
}

// exec answers an ExecCode: the program's recorded end, or what its run
// does next (started anew when no run is at the machine's place).
func (d *drive) exec(ctx context.Context, e *turn.ExecCode) (turn.ExecResult, error) {
	rec, err := d.lookup(e.H.Key, e.H.Hash)
	if err == nil {
		d.stopProgram()
		a, err := decodeAnswer(rec.Outcome.Data)
		if err == nil && a.End == nil {
			err = fmt.Errorf("lash: journal record for %s holds no program end", e.H.Key)
		}
		if err != nil {
			return turn.ExecResult{}, terminal(FailUnreadableJournal, err)
		}
		d.replayed++
		return turn.ExecResult{ID: e.H.ID, End: &turn.ProgramEnd{Output: a.End.Output, Failed: a.End.Failed}}, nil
	}
	if !errors.Is(err, effectlog.ErrNotRecorded) {
		return turn.ExecResult{}, err
	}
	r := d.prog
	switch {
	case r != nil && r.origin == e.H.Key && r.from < r.to && r.to <= len(e.Known):
		outs := make([]codemode.Outcome, 0, r.to-r.from)
		for _, k := range e.Known[r.from:r.to] {
			outs = append(outs, codeOutcome(*k.Outcome))
		}
		r.from = r.to
		select {
		case r.outs <- outs: // the program waits for them in Do
		case <-r.done: // it stopped (its context ended): its end says why
		case <-ctx.Done():
			d.stopProgram()
			return turn.ExecResult{}, context.Cause(ctx)
		}
	default:
		d.stopProgram()
		r = d.startProgram(ctx, e)
	}
	select {
	case calls := <-r.calls:
		res := turn.ExecResult{ID: e.H.ID}
		for _, c := range calls {
			res.Calls = append(res.Calls, programCall(c))
		}
		r.from, r.to = calls[0].Ordinal, calls[len(calls)-1].Ordinal+1
		return res, nil
	case end := <-r.end:
		d.prog = nil
		if end.err != nil {
			var nd *effectlog.NondeterminismError
			if errors.As(end.err, &nd) {
				return turn.ExecResult{}, fmt.Errorf("%w: the program made another call at %s than the one it made before", nd, nd.Key)
			}
			return turn.ExecResult{}, end.err
		}
		return d.recordEnd(ctx, e, end.res)
	case <-ctx.Done():
		d.stopProgram()
		return turn.ExecResult{}, context.Cause(ctx)
	}
}

// startProgram runs e's program from its start on a goroutine of its own.
func (d *drive) startProgram(ctx context.Context, e *turn.ExecCode) *progRun {
	pctx, cancel := context.WithCancel(ctx)
	r := &progRun{origin: e.H.Key, calls: make(chan []codemode.Call),
		outs: make(chan []codemode.Outcome), end: make(chan progResult, 1), cancel: cancel, done: make(chan struct{})}
	host := &progHost{r: r, known: e.Known}
	tools := codeTools(d.tools)
	go func() {
		defer close(r.done)
		res, err := d.s.n.programs.run(pctx, e.Program, tools, host, codemode.Limits{Calls: d.p.config.Limits.ProgramCalls})
		r.end <- progResult{res, err}
	}()
	d.prog = r
	return r
}

// recordEnd journals a program's end under its origin: first writer wins.
func (d *drive) recordEnd(ctx context.Context, e *turn.ExecCode, res codemode.Result) (turn.ExecResult, error) {
	end := &programEnd{Output: renderProgram(res), Failed: res.Error != ""}
	a := &answer{End: end, Request: "program " + e.CallID + "\n" + e.Program + "\n"}
	if err := d.s.boundaryCall("before-record program", e.CallID); err != nil {
		return turn.ExecResult{}, err
	}
	rec, won, err := d.recordAt(ctx, e.H.Key, e.H.Hash, a)
	if err != nil {
		return turn.ExecResult{}, err
	}
	if err := d.s.boundaryCall("after-record program", e.CallID); err != nil {
		return turn.ExecResult{}, err
	}
	if !won {
		if a, err = decodeAnswer(rec.Outcome.Data); err != nil || a.End == nil {
			return turn.ExecResult{}, terminal(FailUnreadableJournal, fmt.Errorf("lash: journal record for %s holds no program end", e.H.Key))
		}
	}
	d.executed++
	return turn.ExecResult{ID: e.H.ID, End: &turn.ProgramEnd{Output: a.End.Output, Failed: a.End.Failed}}, nil
}

// renderProgram is a program's end as the model reads it.
func renderProgram(res codemode.Result) string {
	var b strings.Builder
	if res.Output != "" {
		b.WriteString("printed:\n")
		b.WriteString(res.Output)
		if !strings.HasSuffix(res.Output, "\n") {
			b.WriteByte('\n')
		}
	}
	switch {
	case res.Error != "":
		b.WriteString("error: ")
		b.WriteString(res.Error)
	case res.Value != nil:
		b.WriteString("result: ")
		b.Write(res.Value)
	default:
		b.WriteString("result: None")
	}
	return b.String()
}

// programCalls answers a ProgramCalls effect: each call's record, or the
// call made and recorded, at once for a fan-out. A cancel input stored
// meanwhile stops the calls still running and is claimed on each of their
// keys, as for a tool round.
func (d *drive) programCalls(ctx context.Context, e *turn.ProgramCalls) ([]turn.ProgramOutcome, *string, error) {
	answers := make([]*answer, len(e.Calls))
	for i, c := range e.Calls {
		rec, err := d.lookup(c.Key, c.Hash)
		if errors.Is(err, effectlog.ErrNotRecorded) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		a, err := decodeAnswer(rec.Outcome.Data)
		if err != nil {
			return nil, nil, terminal(FailUnreadableJournal, err)
		}
		answers[i] = a
		d.replayed++
	}
	if slices.IndexFunc(answers, isCancel) < 0 {
		// A child writes no intent (one write a call less). The first
		// calls a run makes after another run's records are in doubt, as
		// the batch after a recorded model answer is: that run may have
		// started them. Calls after those no other run can have reached.
		cause := causeOwn
		if !d.fresh && !d.childRan {
			cause = causeReplayed
		}
		if slices.Contains(answers, nil) {
			d.childRan = true
		}
		ectx, done := d.interrupt.begin(ctx)
		errs := make([]error, len(e.Calls))
		var wg sync.WaitGroup
		for i, c := range e.Calls {
			if answers[i] != nil {
				continue
			}
			run := func() { answers[i], errs[i] = d.child(ctx, ectx, c, cause) }
			if len(e.Calls) == 1 {
				run()
			} else {
				wg.Go(run)
			}
		}
		wg.Wait()
		if stop := done(); stop != nil {
			if err := d.claimChildCancels(ctx, e, answers, stop); err != nil {
				return nil, nil, err
			}
		} else {
			for i := range answers {
				if answers[i] != nil {
					errs[i] = nil
				}
			}
			if err := errors.Join(errs...); err != nil {
				return nil, nil, err
			}
		}
	} else if err := d.claimChildCancels(ctx, e, answers, answers[slices.IndexFunc(answers, isCancel)]); err != nil {
		return nil, nil, err
	}
	outs := make([]turn.ProgramOutcome, len(answers))
	for i, a := range answers {
		if a.Cancel != nil {
			d.took(a)
			return nil, a.Cancel, nil
		}
		outs[i] = childOutcome(e.Calls[i].Call.Kind, a)
	}
	return outs, nil, nil
}

// claimChildCancels claims, with cancel, each call that has no record yet.
func (d *drive) claimChildCancels(ctx context.Context, e *turn.ProgramCalls, answers []*answer, cancel *answer) error {
	for i, c := range e.Calls {
		if answers[i] != nil {
			continue
		}
		a := *cancel
		a.Next, a.Request = nil, "cancelled before its result\n"
		got, err := d.recordChild(ctx, c, &a)
		if err != nil {
			return err
		}
		answers[i] = got
	}
	return nil
}

// recordChild records a for one call of a program, first writer wins, and
// returns the answer that stands.
func (d *drive) recordChild(ctx context.Context, c turn.ChildCall, a *answer) (*answer, error) {
	rec, won, err := d.recordAt(ctx, c.Key, c.Hash, a)
	if err != nil {
		return nil, err
	}
	if won {
		return a, nil
	}
	if a, err = decodeAnswer(rec.Outcome.Data); err != nil {
		return nil, terminal(FailUnreadableJournal, err)
	}
	return a, nil
}

// child makes one call of a program and records its outcome. A tool call
// goes the way of any tool call (hooks, its record), in doubt when cause
// says so; a model call and a sleep are recorded once they end.
func (d *drive) child(ctx, ectx context.Context, c turn.ChildCall, cause intentCause) (*answer, error) {
	switch c.Call.Kind {
	case turn.ChildTool:
		pc := turn.PendingCall{Call: turn.ToolCall{ID: c.Key.Call, Name: c.Call.Tool, Arguments: c.Call.Args}, Key: c.Key, Hash: c.Hash,
			Decision: c.Decision}
		a, _, err := d.toolCall(ctx, ectx, pc, cause, false)
		return a, err
	case turn.ChildModel:
		prompt, why := promptOf(c.Call)
		if why != "" {
			return d.recordChild(ctx, c, &answer{CallErr: &turn.CallError{Code: "bad_arguments", Message: why}})
		}
		if err := d.s.boundaryCall("before-record llm", c.Key.Call); err != nil {
			return nil, err
		}
		began := time.Now()
		req := turn.ModelRequest{Model: d.p.config.Model, Sampling: d.p.config.Sampling,
			Messages: []turn.Message{{Role: turn.RoleUser, Text: prompt}}}
		resp, err := d.completeChild(ectx, req)
		if err != nil && ectx.Err() != nil {
			return nil, context.Cause(ectx) // stopped: record nothing
		}
		a := &answer{Took: time.Since(began), Request: "llm " + c.Key.Call + "\n" + prompt + "\n"}
		if err != nil {
			a.CallErr = callError(err)
		} else {
			a.Response = &resp
		}
		if data, err := encodeAnswer(a); err == nil && int64(len(data)) > d.s.n.client.Config().MaxPayloadBytes {
			// Recorded as the model's failure: calling again would pay for
			// the same answer, as for a turn's own model call.
			a = &answer{CallErr: &turn.CallError{Code: codeAnswerTooLarge, Message: fmt.Sprintf("the model's answer takes %d bytes, more than the %d bytes lash keeps",
				len(data), d.s.n.client.Config().MaxPayloadBytes)}, Took: a.Took, Request: a.Request}
		}
		d.s.n.observe(Event{Kind: EventModelCall, Session: d.s.id, Turn: d.turn, Model: req.Model, Usage: resp.Usage})
		if a, err = d.recordChild(ctx, c, a); err != nil {
			return nil, err
		}
		return a, d.s.boundaryCall("after-record llm", c.Key.Call)
	case turn.ChildSleep:
		why, err := programSleep(ectx, c.Call)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return d.recordChild(ctx, c, &answer{CallErr: &turn.CallError{Code: "bad_arguments", Message: why}})
		}
		return d.recordChild(ctx, c, &answer{Request: "sleep " + c.Key.Call + "\n"})
	}
	return nil, fmt.Errorf("lash: program call of kind %s", c.Call.Kind)
}

// completeChild makes a program's model call, trying again after a
// retryable error as a turn's model call is, within the turn's attempts
// and backoff; the last error is the call's.
func (d *drive) completeChild(ctx context.Context, req turn.ModelRequest) (turn.ModelResponse, error) {
	l := d.p.config.Limits
	attempts := cmp.Or(l.MaxAttempts, turn.DefaultMaxAttempts)
	backoff := l.Backoff
	if backoff == nil {
		backoff = turn.DefaultBackoff
	}
	most := cmp.Or(l.MaxBackoff, turn.DefaultMaxBackoff)
	for attempt := 1; ; attempt++ {
		resp, err := d.p.model.Complete(ctx, req, nil)
		if err == nil || ctx.Err() != nil {
			return resp, err
		}
		ce := callError(err)
		if !ce.Retryable || attempt >= attempts {
			return resp, err
		}
		t := time.NewTimer(min(max(backoff(attempt), ce.RetryAfter), most))
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, err
		case <-t.C:
		}
	}
}

// promptOf reads an llm() call's prompt, or says why it has none.
func promptOf(c turn.ProgramCall) (prompt, why string) {
	var args struct {
		Prompt string `json:"prompt"`
	}
	if err := json.Unmarshal([]byte(c.Args), &args); err != nil || args.Prompt == "" {
		return "", `llm takes a prompt: llm("...")`
	}
	return args.Prompt, ""
}

// programSleep sleeps as a sleep() call asks, or says why it cannot; an
// error is ctx's, which stopped it.
func programSleep(ctx context.Context, c turn.ProgramCall) (why string, err error) {
	var args struct {
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal([]byte(c.Args), &args); err != nil || args.Seconds < 0 || args.Seconds > maxProgramSleep.Seconds() {
		return fmt.Sprintf("sleep takes seconds, from 0 to %g", maxProgramSleep.Seconds()), nil
	}
	t := time.NewTimer(time.Duration(args.Seconds * float64(time.Second)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return "", context.Cause(ctx)
	case <-t.C:
		return "", nil
	}
}

// maxProgramSleep bounds one sleep of a program.
const maxProgramSleep = time.Hour

// childOutcome is a call's record as the program takes it.
func childOutcome(kind turn.ChildKind, a *answer) turn.ProgramOutcome {
	switch {
	case a.Result != nil && a.Result.Status == turn.ToolOK:
		return turn.ProgramOutcome{Status: turn.ChildOK, Value: turn.JSONValue(a.Result.Output)}
	case a.Result != nil && a.Result.Status == turn.ToolPending:
		return turn.ProgramOutcome{Status: turn.ChildPending, Error: a.Result.Output}
	case a.Result != nil:
		return turn.ProgramOutcome{Status: turn.ChildFailed, Error: a.Result.Output}
	case a.CallErr != nil:
		return turn.ProgramOutcome{Status: turn.ChildFailed, Error: a.CallErr.String()}
	case a.Response != nil:
		v, _ := json.Marshal(a.Response.Text)
		u := a.Response.Usage
		return turn.ProgramOutcome{Status: turn.ChildOK, Value: string(v), Usage: &u}
	}
	return turn.ProgramOutcome{Status: turn.ChildOK, Value: "null"} // a sleep
}
