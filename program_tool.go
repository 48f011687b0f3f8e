package lash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/codemode"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// BackgroundProgramTool names, in a process's registration, a program run
// in the background (process_start through the node API, lash-admin
// programs start): the process runs it as one durable call, each call it
// makes a durable step of that call, so an attempt after a crash runs the
// program again from its start and every call with a recorded outcome
// answers from it. It is no tool of the registry: no model is offered it,
// and a model's process_start cannot start it, since a program started so
// would make its calls past the gates of the turn that started it.
const BackgroundProgramTool = "program"

// MaxProgramRun bounds an attempt of a background program.
const MaxProgramRun = time.Hour

// backgroundProgram is a background program's registration arguments.
type backgroundProgram struct {
	Program string `json:"program,omitempty"`
	// Saved names a saved program: name, name@N or name@<sum>.
	Saved string `json:"saved,omitempty"`
	// Requires names the tools the program needs: checked before every
	// attempt, so a program a node cannot run fails at once, named.
	Requires []string `json:"requires,omitempty"`
}

// runBackgroundProgram runs a background program's attempt. The program's
// own failure, or arguments that can never run, fail the process; a
// failure of the moment (a step not recorded, a read that failed) hands
// the attempt back to run again, the calls without records in doubt.
func (n *Node) runBackgroundProgram(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
	p := run.Process()
	var a backgroundProgram
	dec := json.NewDecoder(bytes.NewReader(p.Registration.Input.Args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || (a.Program == "") == (a.Saved == "") || len(a.Requires) > MaxRequires {
		return nil, &processes.ExecError{Code: "bad_arguments",
			Message: fmt.Sprintf(`a program process takes {"program": "..."} or {"saved": "name"}, and at most %d required tools`, MaxRequires)}
	}
	if len(p.ID) > maxBackgroundID {
		return nil, &processes.ExecError{Code: "bad_arguments", Message: fmt.Sprintf("a program process's id is at most %d bytes", maxBackgroundID)}
	}
	ctx, cancel := context.WithTimeout(ctx, MaxProgramRun)
	defer cancel()
	key := turn.ReplayKey{Session: p.Registration.Provenance.Session, Turn: "proc:" + p.ID, Kind: turn.KindToolCall, Call: p.ID}
	info := tools.CallInfo{Key: key, Attempt: run.Attempt(), InDoubt: run.Attempt() > 1}
	ctx = n.toolContext(tools.NewContext(ctx, info))
	if a.Saved != "" {
		// The version is the one the first attempt found, on every attempt.
		pinned, err := tools.Step(ctx, "saved", func(ctx context.Context) (SavedProgram, error) {
			v, err := LoadProgram(ctx, n.client, a.Saved)
			if errors.Is(err, ErrNoProgram) || errors.Is(err, ErrBadInput) {
				return SavedProgram{}, nil // recorded: no attempt will find it
			}
			if err != nil {
				return SavedProgram{}, err
			}
			return SavedProgram{Name: v.Name, Version: v.Version, Sum: v.Sum, Bytes: v.Bytes}, nil
		})
		if err != nil {
			return nil, n.momentary(ctx, err)
		}
		if pinned.Sum == "" {
			return nil, &processes.ExecError{Code: "no_program", Message: fmt.Sprintf("no saved program %q", a.Saved)}
		}
		if err := loadBody(ctx, n.client, &pinned); err != nil {
			return nil, n.momentary(ctx, err)
		}
		a.Program, a.Requires = pinned.Program, append(pinned.Requires, a.Requires...)
	}
	// Tools found again after a restart may take the registry a moment.
	var missing []string
	for _, name := range a.Requires {
		wctx, cancel := context.WithTimeout(ctx, requireWait)
		_, ok := n.opts.tools.Await(wctx, name)
		cancel()
		if !ok {
			missing = append(missing, strconv.Quote(name))
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if len(missing) > 0 {
		return nil, &processes.ExecError{Code: "missing_tools", Message: fmt.Sprintf("this node has no tool %s, which the program requires", strings.Join(missing, ", "))}
	}
	res, err := n.programs.run(ctx, a.Program, codeTools(n.opts.tools.Specs()), &stepHost{n: n, info: info}, codemode.Limits{})
	if err != nil {
		return nil, n.momentary(ctx, err)
	}
	out := renderProgram(res)
	if res.Error != "" {
		return nil, &processes.ExecError{Code: "program_failed", Message: out}
	}
	return json.Marshal(out)
}

// momentary is an attempt's error that another attempt may not meet: the
// attempt is handed back. The context's own ending is left as it is.
func (n *Node) momentary(ctx context.Context, err error) error {
	var nd *nondeterminism
	switch {
	case ctx.Err() != nil:
		return err
	case errors.As(err, &nd):
		return &processes.ExecError{Code: "nondeterminism", Message: err.Error()}
	}
	return processes.Retryable(err)
}

// maxBackgroundID bounds a background program's process id: its calls'
// ids add "#<ordinal>", and every id must fit a subject token.
const maxBackgroundID = turn.MaxIDBytes - 32

// requireWait bounds the wait for a required tool the registry has yet to
// find (a node that just started).
const requireWait = 30 * time.Second

// nondeterminism: a background program made another call than the one
// recorded at its place.
type nondeterminism struct{ ordinal int }

func (e *nondeterminism) Error() string {
	return fmt.Sprintf("lash: nondeterminism: the program made another call at %d than the recorded one", e.ordinal)
}

// stepHost makes a background program's calls, each a durable step of
// the program's call, named by its ordinal.
type stepHost struct {
	n    *Node
	info tools.CallInfo
}

// stepOutcome is a call's outcome as its step records it, with the hash of
// the call, so a run that makes another call there is told.
type stepOutcome struct {
	Call  string          `json:"call"`
	Value json.RawMessage `json:"value,omitempty"`
	Error string          `json:"error,omitempty"`
}

func (h *stepHost) Do(ctx context.Context, calls []codemode.Call) ([]codemode.Outcome, error) {
	outs := make([]codemode.Outcome, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { outs[i], errs[i] = h.one(ctx, c) })
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}

func (h *stepHost) one(ctx context.Context, c codemode.Call) (codemode.Outcome, error) {
	pc := programCall(c)
	hash := turn.ChildHash(pc).String()
	raw, err := tools.Step(ctx, "#"+strconv.Itoa(c.Ordinal), func(ctx context.Context) (stepOutcome, error) {
		o, err := h.perform(ctx, pc)
		o.Call = hash
		// Measured as the step will record it: HTML in it grows when
		// encoded.
		if b, merr := json.Marshal(o); err == nil && (merr != nil || len(b) > MaxStepBytes-256) {
			o = stepOutcome{Call: hash, Error: fmt.Sprintf("the call's outcome takes %d bytes encoded, more than the %d a background program keeps", len(b), MaxStepBytes-256)}
		}
		return o, err
	})
	if err != nil {
		return codemode.Outcome{}, err
	}
	if raw.Call != hash {
		return codemode.Outcome{}, &nondeterminism{c.Ordinal}
	}
	if raw.Error != "" {
		return codemode.Outcome{Error: raw.Error}, nil
	}
	return codemode.Outcome{Value: raw.Value}, nil
}

// perform makes one call. An error is an interruption: nothing is
// recorded, and the next attempt makes the call again.
func (h *stepHost) perform(ctx context.Context, c turn.ProgramCall) (stepOutcome, error) {
	n := h.n
	switch c.Kind {
	case turn.ChildTool:
		if c.Tool == BackgroundProgramTool {
			return stepOutcome{Error: "a program cannot start a program"}, nil
		}
		id := h.info.Key.Call + "#" + strconv.Itoa(c.Ordinal)
		key := h.info.Key
		key.Kind, key.Call = turn.KindProgramCall, id
		call := turn.PendingCall{Call: turn.ToolCall{ID: id, Name: c.Tool, Arguments: c.Args}, Key: key}
		// An attempt after the first may have made the call already.
		res, err := n.runner.Invoke(n.toolContext(ctx), call, h.info.Attempt, h.info.InDoubt)
		if err != nil {
			return stepOutcome{}, err
		}
		switch res.Status {
		case turn.ToolOK:
			return stepOutcome{Value: json.RawMessage(turn.JSONValue(res.Output))}, nil
		case turn.ToolPending:
			return stepOutcome{Error: "a background program's call cannot wait for a decision: " + res.Output}, nil
		}
		return stepOutcome{Error: res.Output}, nil
	case turn.ChildModel:
		prompt, why := promptOf(c)
		if why != "" {
			return stepOutcome{Error: why}, nil
		}
		if n.opts.model == nil {
			return stepOutcome{Error: "this node has no model"}, nil
		}
		resp, err := n.opts.model.Complete(ctx, turn.ModelRequest{Model: n.opts.machine.Model, Sampling: n.opts.machine.Sampling,
			Messages: []turn.Message{{Role: turn.RoleUser, Text: prompt}}}, nil)
		if err != nil {
			if ctx.Err() != nil {
				return stepOutcome{}, context.Cause(ctx)
			}
			return stepOutcome{Error: callError(err).String()}, nil
		}
		v, _ := json.Marshal(resp.Text)
		return stepOutcome{Value: v}, nil
	case turn.ChildSleep:
		why, err := programSleep(ctx, c)
		if err != nil || why != "" {
			return stepOutcome{Error: why}, err
		}
		return stepOutcome{Value: json.RawMessage("null")}, nil
	}
	return stepOutcome{}, fmt.Errorf("lash: program call of kind %s", c.Kind)
}
