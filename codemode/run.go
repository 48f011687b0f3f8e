package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// Kind is what a call asks for.
type Kind uint8

const (
	// KindTool calls a tool, named by Call.Tool.
	KindTool Kind = iota + 1
	// KindModel is llm(prompt, ...): the model's answer.
	KindModel
	// KindSleep is sleep(seconds).
	KindSleep
)

func (k Kind) String() string {
	switch k {
	case KindTool:
		return "tool"
	case KindModel:
		return "llm"
	case KindSleep:
		return "sleep"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Tool is a function a program may call.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON schema of its arguments, an object.
	Schema json.RawMessage
}

// Call is one call a program makes. Ordinal counts the program's calls
// from 0 in the order it makes them (a fan-out takes one each, in its
// list's order): a program run again makes the same calls at the same
// ordinals, which is what lets a host answer them from its journal.
type Call struct {
	Ordinal int
	Kind    Kind
	// Tool is the tool's name, for KindTool.
	Tool string
	// Args is a JSON object: the arguments as the program gave them.
	Args json.RawMessage
}

// Outcome is what a call came to: a value, a failure, or cancelled (a
// fan-out's sibling stopped it).
type Outcome struct {
	Value     json.RawMessage `json:"value,omitempty"`
	Error     string          `json:"error,omitempty"`
	Cancelled bool            `json:"cancelled,omitempty"`
}

// Host makes a program's calls: one, or a fan-out's all at once, whose
// outcomes come back in the same order. An error is the host's, not the
// program's (the call parks, it was recorded as another call, its outcome
// could not be recorded): the program is cut there and Run returns it.
type Host interface {
	Do(ctx context.Context, calls []Call) ([]Outcome, error)
}

// Limits bound a program. Past each, the program ends with an error the
// model reads, never a wedged session.
type Limits struct {
	// Source bounds the program's text (default 64 KiB).
	Source int
	// Steps bounds its execution steps (default 10,000,000).
	Steps uint64
	// Output bounds what it prints (default 64 KiB).
	Output int
	// Calls bounds its calls (default 1,000); Fanout those in one
	// parallel() (default 64).
	Calls  int
	Fanout int
	// Value bounds one call's arguments, one call's outcome as the
	// program takes it and the program's result, encoded (default 1 MiB).
	Value int
	// Quiet bounds the time it runs without a call (default 10 s).
	Quiet time.Duration
}

func (l *Limits) defaults() {
	if l.Source <= 0 {
		l.Source = defaultSource
	}
	if l.Steps == 0 {
		l.Steps = 10_000_000
	}
	if l.Output <= 0 {
		l.Output = 64 << 10
	}
	if l.Calls <= 0 {
		l.Calls = 1000
	}
	if l.Fanout <= 0 {
		l.Fanout = 64
	}
	if l.Value <= 0 {
		l.Value = 1 << 20
	}
	if l.Quiet <= 0 {
		l.Quiet = 10 * time.Second
	}
}

// Result is how a program ended, for the model: its result (the global
// named result, if it set one), what it printed, or why it failed.
type Result struct {
	Value  json.RawMessage `json:"value,omitempty"`
	Output string          `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	Calls  int             `json:"calls"`
	Steps  uint64          `json:"steps"`
}

// fileOptions: while loops and top-level control are allowed (the step
// bound ends any loop); recursion is not, so no program grows the Go
// stack without bound.
var fileOptions = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true}

// Check says whether src is a program this package runs: within the
// source bound, and one that parses.
func Check(src string) error {
	if len(src) > defaultSource {
		return fmt.Errorf("the program is %d bytes, at most %d", len(src), defaultSource)
	}
	if _, err := fileOptions.Parse("program", src, 0); err != nil {
		return errors.New(describe(err))
	}
	return nil
}

// defaultSource is Limits.Source's default.
const defaultSource = 64 << 10

// Run runs program src against tools, its calls made through host. It
// returns the program's end as a Result (its failures included: they are
// the model's to read), or the host's error, with which the program was
// cut short and is to run again from its start later.
func Run(ctx context.Context, src string, tools []Tool, host Host, lim Limits) (Result, error) {
	lim.defaults()
	res, err := execute(ctx, src, tools, host, lim)
	res.Error = clip(res.Error, lim.Output) // an error is output too
	return res, err
}

func execute(ctx context.Context, src string, tools []Tool, host Host, lim Limits) (Result, error) {
	if len(src) > lim.Source {
		return Result{Error: fmt.Sprintf("the program is %d bytes, at most %d", len(src), lim.Source)}, nil
	}
	r := &run{ctx: ctx, host: host, lim: lim, tools: map[string]bool{}}
	thread := &starlark.Thread{Name: "program", Print: r.print}
	thread.SetMaxExecutionSteps(lim.Steps)
	thread.OnMaxSteps = func(t *starlark.Thread) {
		r.fail(t, fmt.Sprintf("the program ran more than %d steps", lim.Steps))
	}
	r.thread = thread
	quiet := time.AfterFunc(lim.Quiet, r.tooQuiet)
	r.quiet = quiet
	defer quiet.Stop()
	// A caller that gives up stops the program between its steps, not
	// only at its next call.
	stop := context.AfterFunc(ctx, func() { thread.Cancel("the program was stopped") })
	defer stop()
	globals, err := starlark.ExecFileOptions(fileOptions, thread, "program", src, r.predeclared(tools))
	if ctx.Err() != nil {
		return Result{}, context.Cause(ctx)
	}
	res := Result{Output: r.out.String(), Calls: r.next, Steps: thread.ExecutionSteps()}
	r.mu.Lock()
	hostErr, limit := r.hostErr, r.limit
	r.mu.Unlock()
	switch {
	case hostErr != nil:
		return Result{}, hostErr
	case limit != "":
		res.Error = limit
		return res, nil
	case err != nil:
		res.Error = describe(err)
		return res, nil
	}
	if v, ok := globals["result"]; ok {
		if b, err := toJSON(v, lim.Value); err != nil {
			res.Error = "result: " + err.Error()
		} else {
			res.Value = b
		}
	}
	return res, nil
}

// run is one run of a program.
type run struct {
	ctx    context.Context
	host   Host
	lim    Limits
	thread *starlark.Thread
	quiet  *time.Timer
	tools  map[string]bool
	next   int // the next call's ordinal
	out    strings.Builder

	mu      sync.Mutex
	hostErr error  // the host's error that cut the program
	limit   string // the limit the program passed
}

// fail ends the program for a limit it passed.
func (r *run) fail(t *starlark.Thread, why string) {
	r.mu.Lock()
	if r.limit == "" && r.hostErr == nil {
		r.limit = why
	}
	r.mu.Unlock()
	t.Cancel(why)
}

func (r *run) tooQuiet() {
	r.fail(r.thread, fmt.Sprintf("the program ran %s without a call", r.lim.Quiet))
}

func (r *run) print(t *starlark.Thread, msg string) {
	if r.out.Len()+len(msg)+1 > r.lim.Output {
		r.fail(t, fmt.Sprintf("the program printed more than %d bytes", r.lim.Output))
		return
	}
	r.out.WriteString(msg)
	r.out.WriteByte('\n')
}

// describe is an evaluation error as the model reads it: the message and
// where, without Go's frames.
func describe(err error) string {
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		return ee.Backtrace()
	}
	return err.Error()
}

// builtins are the names a program has beside its tools' (and
// Starlark's own, starlark.Universe).
var builtins = []string{"json", "struct", "llm", "sleep", "call", "attempt", "parallel", "tool", "result"}

// names gives each tool the Starlark name it is called by: its own name
// with '-' and '.' as '_', unless that is no name, or one of the
// builtins or Starlark's, or two tools would share it. A tool without
// one is called as tool("its name", ...).
func names(tools []Tool) map[string]string {
	count := map[string]int{}
	for _, t := range tools {
		count[identifier(t.Name)]++
	}
	out := map[string]string{}
	for _, t := range tools {
		id := identifier(t.Name)
		if id != "" && count[id] == 1 && !slices.Contains(builtins, id) && !starlark.Universe.Has(id) {
			out[t.Name] = id
		}
	}
	return out
}

func (r *run) predeclared(tools []Tool) starlark.StringDict {
	d := starlark.StringDict{
		"json":     jsonModule(r.lim.Value),
		"struct":   starlark.NewBuiltin("struct", starlarkstruct.Make),
		"llm":      starlark.NewBuiltin("llm", r.callable(KindModel, "")),
		"sleep":    starlark.NewBuiltin("sleep", r.callable(KindSleep, "")),
		"call":     starlark.NewBuiltin("call", r.describeCall),
		"attempt":  starlark.NewBuiltin("attempt", r.attempt),
		"parallel": starlark.NewBuiltin("parallel", r.parallel),
		"tool":     starlark.NewBuiltin("tool", r.namedTool),
	}
	for _, t := range tools {
		r.tools[t.Name] = true
	}
	for tool, id := range names(tools) {
		d[id] = &toolFunc{Builtin: starlark.NewBuiltin(id, r.callable(KindTool, tool)), tool: tool}
	}
	return d
}

// toolFunc is a tool as a program's function: call() and attempt() read
// which tool it calls.
type toolFunc struct {
	*starlark.Builtin
	tool string
}

// identifier is a tool's name as a Starlark name ('-' and '.' become
// '_'), or "" when it cannot be one: such a tool is called as
// tool("name", ...).
func identifier(name string) string {
	b := []byte(name)
	for i, c := range b {
		switch {
		case c == '-' || c == '.':
			b[i] = '_'
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9':
		default:
			return ""
		}
	}
	if len(b) == 0 {
		return ""
	}
	// A keyword (lambda, try, ...) parses as no name.
	if e, err := syntax.ParseExpr("name", b, 0); err != nil {
		return ""
	} else if _, ok := e.(*syntax.Ident); !ok {
		return ""
	}
	return string(b)
}

// pending is a call described, not made: what call() returns, for
// parallel().
type pending struct {
	kind Kind
	tool string
	args json.RawMessage
}

// name is the call's name in messages: the tool's, llm or sleep.
func (p *pending) name() string {
	if p.kind == KindTool {
		return p.tool
	}
	return p.kind.String()
}

func (p *pending) String() string        { return "call(" + p.name() + ")" }
func (p *pending) Type() string          { return "call" }
func (p *pending) Freeze()               {}
func (p *pending) Truth() starlark.Bool  { return true }
func (p *pending) Hash() (uint32, error) { return 0, errors.New("unhashable: call") }

// callable is the function that makes a call of kind (to tool).
func (r *run) callable(kind Kind, tool string) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		p, err := r.arguments(kind, tool, args, kwargs)
		if err != nil {
			return nil, err
		}
		outs, err := r.do(t, []*pending{p})
		if err != nil {
			return nil, err
		}
		return r.take(p.name(), outs[0])
	}
}

// namedTool is tool("name", ...): a tool whose name is no Starlark name.
func (r *run) namedTool(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) == 0 {
		return nil, errors.New("tool: the tool's name first")
	}
	name, ok := starlark.AsString(args[0])
	if !ok || !r.tools[name] {
		return nil, fmt.Errorf("tool: no tool %s", clip(args[0].String(), 100))
	}
	return r.callable(KindTool, name)(t, b, args[1:], kwargs)
}

// arguments makes a call's JSON arguments: keywords, or one dict. llm and
// sleep also take their main argument by position.
func (r *run) arguments(kind Kind, tool string, args starlark.Tuple, kwargs []starlark.Tuple) (*pending, error) {
	p := &pending{kind: kind, tool: tool}
	d := starlark.NewDict(len(kwargs))
	switch {
	case len(args) == 1 && kind != KindTool:
		key := "prompt"
		if kind == KindSleep {
			key = "seconds"
		}
		_ = d.SetKey(starlark.String(key), args[0])
	case len(args) == 1:
		given, ok := args[0].(*starlark.Dict)
		if !ok {
			return nil, fmt.Errorf("%s: arguments by keyword, or one dict", p.name())
		}
		for _, item := range given.Items() {
			_ = d.SetKey(item[0], item[1])
		}
	case len(args) > 1:
		return nil, fmt.Errorf("%s: arguments by keyword, or one dict", p.name())
	}
	for _, kv := range kwargs {
		if err := d.SetKey(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	b, err := toJSON(d, r.lim.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: arguments: %v", p.name(), err)
	}
	p.args = b
	return p, nil
}

// do makes calls through the host, each at its ordinal.
func (r *run) do(t *starlark.Thread, ps []*pending) ([]Outcome, error) {
	if r.next+len(ps) > r.lim.Calls {
		why := fmt.Sprintf("the program made more than %d calls", r.lim.Calls)
		r.fail(t, why)
		return nil, errors.New(why)
	}
	calls := make([]Call, len(ps))
	for i, p := range ps {
		calls[i] = Call{Ordinal: r.next + i, Kind: p.kind, Tool: p.tool, Args: p.args}
	}
	r.next += len(ps)
	r.quiet.Stop()
	outs, err := r.host.Do(r.ctx, calls)
	r.quiet.Reset(r.lim.Quiet)
	if err == nil && len(outs) != len(calls) {
		err = fmt.Errorf("codemode: the host answered %d calls with %d outcomes", len(calls), len(outs))
	}
	if err != nil {
		r.mu.Lock()
		if r.hostErr == nil {
			r.hostErr = err
		}
		r.mu.Unlock()
		t.Cancel("cut by its host")
		return nil, err
	}
	return outs, nil
}

// maxFailure bounds a call's failure as the program reads it.
const maxFailure = 4 << 10

// take is an outcome as the program takes it: the value, or a failure.
func (r *run) take(name string, o Outcome) (starlark.Value, error) {
	switch {
	case o.Cancelled:
		return nil, fmt.Errorf("%s: cancelled", name)
	case o.Error != "":
		return nil, fmt.Errorf("%s failed: %s", name, clip(o.Error, maxFailure))
	}
	return r.value(name, o.Value)
}

func (r *run) value(tool string, raw json.RawMessage) (starlark.Value, error) {
	if len(raw) == 0 {
		return starlark.None, nil
	}
	if len(raw) > r.lim.Value {
		return nil, fmt.Errorf("%s: a result of %d bytes, at most %d", tool, len(raw), r.lim.Value)
	}
	v, err := fromJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: unreadable result: %v", tool, err)
	}
	return v, nil
}

// describeCall is call(fn, ...): the call fn(...) described, for
// parallel().
func (r *run) describeCall(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	kind, tool, rest, err := r.target(args)
	if err != nil {
		return nil, fmt.Errorf("call: %v", err)
	}
	return r.arguments(kind, tool, rest, kwargs)
}

// target is what a function passed to call() or attempt() calls (for
// tool, the tool named after it), and the arguments after those.
func (r *run) target(args starlark.Tuple) (Kind, string, starlark.Tuple, error) {
	if len(args) == 0 {
		return 0, "", nil, errors.New("a tool first")
	}
	switch fn := args[0].(type) {
	case *toolFunc:
		return KindTool, fn.tool, args[1:], nil
	case *starlark.Builtin:
		switch {
		case fn.Name() == "llm":
			return KindModel, "", args[1:], nil
		case fn.Name() == "sleep":
			return KindSleep, "", args[1:], nil
		case fn.Name() == "tool" && len(args) > 1:
			name, ok := starlark.AsString(args[1])
			if !ok || !r.tools[name] {
				return 0, "", nil, fmt.Errorf("no tool %s", clip(args[1].String(), 100))
			}
			return KindTool, name, args[2:], nil
		}
	}
	return 0, "", nil, fmt.Errorf("%s is not a tool, llm or sleep", clip(args[0].String(), 100))
}

// outcomeStruct is an outcome as a value: ok, value, error, cancelled.
func (r *run) outcomeStruct(name string, o Outcome) starlark.Value {
	fields := starlark.StringDict{"ok": starlark.Bool(!o.Cancelled && o.Error == ""), "value": starlark.None,
		"error": starlark.None, "cancelled": starlark.Bool(o.Cancelled)}
	switch {
	case o.Cancelled:
		fields["error"] = starlark.String("cancelled")
	case o.Error != "":
		fields["error"] = starlark.String(clip(o.Error, maxFailure))
	default:
		v, err := r.value(name, o.Value)
		if err != nil {
			fields["ok"], fields["error"] = starlark.False, starlark.String(err.Error())
		} else {
			fields["value"] = v
		}
	}
	return starlarkstruct.FromStringDict(starlarkstruct.Default, fields)
}

// attempt is attempt(fn, ...): fn(...) made, its failure a value rather
// than the program's end.
func (r *run) attempt(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	kind, tool, rest, err := r.target(args)
	if err != nil {
		return nil, fmt.Errorf("attempt: %v", err)
	}
	p, err := r.arguments(kind, tool, rest, kwargs)
	if err != nil {
		return nil, err
	}
	outs, err := r.do(t, []*pending{p})
	if err != nil {
		return nil, err
	}
	return r.outcomeStruct(p.name(), outs[0]), nil
}

// parallel is parallel([call(...), ...]): the calls made at once, each
// outcome (ok, value, error, cancelled) in the list's order.
func (r *run) parallel(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var list *starlark.List
	if err := starlark.UnpackPositionalArgs("parallel", args, kwargs, 1, &list); err != nil {
		return nil, err
	}
	if list.Len() > r.lim.Fanout {
		return nil, fmt.Errorf("parallel: %d calls, at most %d", list.Len(), r.lim.Fanout)
	}
	ps := make([]*pending, list.Len())
	for i := range list.Len() {
		p, ok := list.Index(i).(*pending)
		if !ok {
			return nil, fmt.Errorf("parallel: element %d is a %s, not a call(...)", i, list.Index(i).Type())
		}
		ps[i] = p
	}
	if len(ps) == 0 {
		return starlark.NewList(nil), nil
	}
	outs, err := r.do(t, ps)
	if err != nil {
		return nil, err
	}
	vals := make([]starlark.Value, len(outs))
	for i, o := range outs {
		vals[i] = r.outcomeStruct(ps[i].name(), o)
	}
	return starlark.NewList(vals), nil
}
