package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/codemode"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// BackgroundProgramTool is the tool that runs a program as a tool call, for
// a background process to run (process_start with this tool): each call
// the program makes is a durable step of the tool's call, so an attempt
// after a crash runs the program again from its start and every call with
// a recorded outcome answers from it.
const BackgroundProgramTool = "program"

// MaxProgramRun bounds a background program's run: its tool call's deadline.
const MaxProgramRun = time.Hour

// backgroundProgram is the program tool's arguments.
type backgroundProgram struct {
	Program string `json:"program,omitempty" jsonschema:"the Starlark program (see run_program), or"`
	Saved   string `json:"saved,omitempty" jsonschema:"a saved program: name, name@version or name@sum"`
	// Requires names the tools the program needs: checked before every
	// attempt, so a program a node cannot run fails at once, named.
	Requires []string `json:"requires,omitempty" jsonschema:"the tools the program calls, checked before it runs"`
}

// BackgroundProgram is the program tool, for the node's registry (lash-node
// registers it with the process tools).
func (n *Node) BackgroundProgram() tools.Tool {
	t, err := tools.Func(BackgroundProgramTool, "Runs a Starlark program, as run_program does, as one durable call: started as a background process (process_start), it outlives the node running it, each call it makes recorded once.",
		n.backgroundProgram, tools.WithTimeout(MaxProgramRun))
	if err != nil {
		panic(err) // a fixed signature: cannot fail
	}
	return t
}

func (n *Node) backgroundProgram(ctx context.Context, a backgroundProgram) (string, error) {
	info, ok := tools.Info(ctx)
	if !ok {
		return "", errors.New("a program runs only as a tool call of a node")
	}
	if strings.Contains(info.Key.Call, "#") {
		return "", errors.New("a program cannot start a program")
	}
	if (a.Program == "") == (a.Saved == "") {
		return "", errors.New(`give the program, or the name of a saved one: {"program": "..."} or {"saved": "name"}`)
	}
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
			return "", err
		}
		if pinned.Sum == "" {
			return "", fmt.Errorf("no saved program %q", a.Saved)
		}
		if err := loadBody(ctx, n.client, &pinned); err != nil {
			return "", err
		}
		a.Program, a.Requires = pinned.Program, append(pinned.Requires, a.Requires...)
	}
	var missing []string
	for _, name := range a.Requires {
		if _, ok := n.opts.tools.Get(name); !ok || name == BackgroundProgramTool {
			missing = append(missing, strconv.Quote(name))
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("this node has no tool %s, which the program requires", strings.Join(missing, ", "))
	}
	var specs []turn.ToolSpec
	for _, s := range n.opts.tools.Specs() {
		if s.Name != BackgroundProgramTool {
			specs = append(specs, s)
		}
	}
	host := &stepHost{n: n, info: info}
	res, err := n.programs.run(ctx, a.Program, codeTools(specs), host, codemode.Limits{})
	if err != nil {
		return "", err // interrupted, or its steps could not be recorded: the attempt ends without an outcome
	}
	out := renderProgram(res)
	if res.Error != "" {
		return "", errors.New(out)
	}
	return out, nil
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
		if err == nil && len(o.Value)+len(o.Error) > MaxStepBytes-1024 {
			o = stepOutcome{Call: hash, Error: fmt.Sprintf("the call's outcome takes %d bytes, more than the %d a background program keeps", len(o.Value)+len(o.Error), MaxStepBytes-1024)}
		}
		return o, err
	})
	if err != nil {
		return codemode.Outcome{}, err
	}
	if raw.Call != hash {
		return codemode.Outcome{}, fmt.Errorf("lash: nondeterminism: the program made another call at %d than the recorded one", c.Ordinal)
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
			return stepOutcome{Value: json.RawMessage(jsonValue(res.Output))}, nil
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
			return stepOutcome{Error: describeErr(callError(err))}, nil
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
