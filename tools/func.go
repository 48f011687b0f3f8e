package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/lash-run/lash/turn"
)

// Option configures a tool built by Func.
type Option func(*funcOptions)

type funcOptions struct {
	timeout time.Duration
	schema  *jsonschema.ForOptions
}

// WithTimeout sets the tool's per-call timeout, overriding the Runner's
// default.
func WithTimeout(d time.Duration) Option {
	return func(o *funcOptions) { o.timeout = d }
}

// WithSchemaOptions passes options to schema inference, for instance
// TypeSchemas for argument types jsonschema-go cannot infer.
func WithSchemaOptions(opts *jsonschema.ForOptions) Option {
	return func(o *funcOptions) { o.schema = opts }
}

// Func makes a tool of a Go function whose arguments are the struct A.
//
// The JSON schema offered to the model is inferred from A by jsonschema-go:
// properties are named by json tags, described by jsonschema tags, and
// required unless tagged omitempty or omitzero or of pointer type; nested
// structs, slices, maps and pointers are followed; no property outside A is
// allowed. The schema text is rendered once, with properties in field
// order, so it is the same bytes on every run.
//
// On each call the arguments are checked against the schema and decoded
// strictly into A. Empty arguments count as {}. Malformed JSON, a missing
// required field, a value of the wrong type or an unknown field make the call
// fail with a message, shown to the model, that names the field and the
// problem; fn is not called.
//
// fn's string is the output. An error fails the call with its text, except
// one made by Pending, which suspends the call. A panic in fn fails the call
// too. fn must honour ctx.
func Func[A any](name, description string, fn func(ctx context.Context, args A) (string, error), opts ...Option) (Tool, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: tool %q: nil function", ErrInvalidSpec, name)
	}
	var o funcOptions
	for _, opt := range opts {
		opt(&o)
	}
	schema, text, err := inferSchema[A](o.schema)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %v", ErrInvalidSpec, name, err)
	}
	if schema.Type != "object" {
		var a A
		return nil, fmt.Errorf("%w: tool %q: arguments must be a struct or a map with string keys, not %T", ErrInvalidSpec, name, a)
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %v", ErrInvalidSpec, name, err)
	}
	t := &funcTool[A]{
		spec:     turn.ToolSpec{Name: name, Description: description, Schema: text},
		schema:   schema,
		resolved: resolved,
		timeout:  o.timeout,
		fn:       fn,
	}
	t.emptyProblem = t.check([]byte("{}"))
	t.emptyIsZero = reflect.TypeFor[A]().Kind() == reflect.Struct
	return t, nil
}

type funcTool[A any] struct {
	spec     turn.ToolSpec
	schema   *jsonschema.Schema
	resolved *jsonschema.Resolved
	timeout  time.Duration
	fn       func(context.Context, A) (string, error)
	// emptyProblem is what check says of {}, the arguments of many calls.
	emptyProblem string
	// emptyIsZero: A is a struct, which {} decodes to its zero value (a
	// map or a pointer would get a fresh value each call).
	emptyIsZero bool
}

func (t *funcTool[A]) Spec() turn.ToolSpec    { return t.spec }
func (t *funcTool[A]) Timeout() time.Duration { return t.timeout }

func (t *funcTool[A]) Call(ctx context.Context, raw json.RawMessage) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, err = Result{}, &PanicError{Tool: t.spec.Name, Value: v, Stack: debug.Stack()}
		}
	}()
	args, problem := t.decode(raw)
	if problem != "" {
		return Result{Status: turn.ToolError, Output: "invalid arguments: " + problem}, nil
	}
	out, err := t.fn(ctx, args)
	if err != nil {
		return Result{}, err
	}
	return Result{Status: turn.ToolOK, Output: out}, nil
}

// decode validates raw against the schema and decodes it into A, or says
// what is wrong with it.
func (t *funcTool[A]) decode(raw json.RawMessage) (A, string) {
	var zero A
	data := bytes.TrimSpace(raw)
	if len(data) == 0 || string(data) == "{}" {
		if t.emptyProblem != "" || t.emptyIsZero {
			return zero, t.emptyProblem
		}
		data = []byte("{}")
	} else if problem := t.check(data); problem != "" {
		return zero, problem
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var args A
	if err := dec.Decode(&args); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return zero, fmt.Sprintf("field %q: cannot use JSON %s as %s", te.Field, te.Value, te.Type)
		}
		return zero, trimJSON(err)
	}
	return args, ""
}

// check says what is wrong with data against the schema, or "".
func (t *funcTool[A]) check(data []byte) string {
	var inst any
	if err := json.Unmarshal(data, &inst); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Sprintf("malformed JSON: %s (at byte %d)", se, se.Offset)
		}
		return "malformed JSON: " + trimJSON(err)
	}
	if err := t.resolved.Validate(inst); err != nil {
		if msg := explain(t.schema, inst, ""); msg != "" {
			return msg
		}
		return err.Error()
	}
	return ""
}

func trimJSON(err error) string { return strings.TrimPrefix(err.Error(), "json: ") }
