package natstool

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/propagation"
)

// Served is a tool for Serve.
type Served struct {
	Name        string
	Description string
	// Schema is the JSON schema of the arguments: a JSON object whose type
	// is "object". Serve checks every call's arguments against it.
	Schema json.RawMessage
	// Handle answers a call with the output the model sees, or an error:
	// one made by Pending suspends the call, any other fails it with its
	// text.
	Handle func(ctx context.Context, req Request) (string, error)
}

// Request is one call, as the headers of the contract carry it.
type Request struct {
	// Args are the call's JSON arguments; {} when the request had none.
	Args json.RawMessage
	// IdempotencyKey is the same on every attempt of the call: do the
	// call's side effects at most once per key.
	IdempotencyKey string
	// Attempt counts attempts from 1; 0 when the caller did not say.
	Attempt int
	// InDoubt says an earlier attempt may have run without its outcome
	// being recorded: check by IdempotencyKey whether it did.
	InDoubt bool
	CallID  string
	// Decision is the payload of the decision that resumed the call, or nil.
	Decision *string
	// Ticket is the call's ticket (HeaderCallTicket): give it to the node
	// API's step, event_key and await_event (nodeapi.Client) to record
	// steps and wait for events as Go tools do. Empty on a deployment
	// without a secret.
	Ticket string
}

// Pending returns the error with which a handler suspends its call until a
// decision arrives; the ticket says what the call waits for. It is
// tools.Pending, so a handler may return either.
func Pending(ticket string) error { return tools.Pending(ticket) }

// Serve adds the micro service svc on nc with one endpoint per tool, on
// <prefix>.tool.<name> with the contract's metadata. An empty prefix means
// DefaultPrefix. It checks every tool before it adds anything.
//
// micro hands an endpoint's requests to its handler one at a time, so an
// instance runs one call of a tool at a time; start more instances, which
// share micro's queue group, to run calls in parallel. Handlers get a
// context that is never cancelled: nothing in a request says how long its
// caller waits, and Stop and Drain let a running handler finish.
func Serve(nc *nats.Conn, prefix string, svc micro.Config, served ...Served) (micro.Service, error) {
	prefix, err := checkPrefix(prefix)
	if err != nil {
		return nil, err
	}
	type endpoint struct {
		spec     turn.ToolSpec
		resolved *jsonschema.Resolved
		handle   func(context.Context, Request) (string, error)
	}
	eps := make([]endpoint, 0, len(served))
	seen := map[string]bool{}
	for _, s := range served {
		spec, err := checkSpec(turn.ToolSpec{Name: s.Name, Description: s.Description, Schema: string(s.Schema)})
		if err != nil {
			return nil, fmt.Errorf("natstool: serve %q: %w", s.Name, err)
		}
		if s.Handle == nil {
			return nil, fmt.Errorf("natstool: serve %q: nil Handle", s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("natstool: serve %q: %w", s.Name, tools.ErrDuplicate)
		}
		seen[s.Name] = true
		resolved, _ := resolveSchema(spec.Schema) // checkSpec resolved it already
		eps = append(eps, endpoint{spec, resolved, s.Handle})
	}

	service, err := micro.AddService(nc, svc)
	if err != nil {
		return nil, fmt.Errorf("natstool: %w", err)
	}
	for _, ep := range eps {
		err := service.AddEndpoint(ep.spec.Name, handler(ep.spec.Name, ep.resolved, ep.handle),
			micro.WithEndpointSubject(Subject(prefix, ep.spec.Name)),
			micro.WithEndpointMetadata(map[string]string{
				MetaDescription: ep.spec.Description,
				MetaSchema:      ep.spec.Schema,
			}))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("natstool: serve %q: %w", ep.spec.Name, err), service.Stop())
		}
	}
	// Once Serve returns, the server knows the subscriptions: a discovery
	// sent from another connection right after finds the tools.
	if err := nc.Flush(); err != nil {
		return nil, errors.Join(fmt.Errorf("natstool: %w", err), service.Stop())
	}
	return service, nil
}

func handler(name string, schema *jsonschema.Resolved, handle func(context.Context, Request) (string, error)) micro.HandlerFunc {
	return func(r micro.Request) {
		req, problem := decodeRequest(r, schema)
		if problem != "" {
			respondError(r, "400", problem)
			return
		}
		// A caller's trace context (traceparent) becomes the handler's, so
		// the tool's spans join the turn's trace.
		ctx := traceContext.Extract(context.Background(), propagation.HeaderCarrier(r.Headers()))
		out, err := call(ctx, name, handle, req)
		var pe *tools.PendingError
		switch {
		case errors.As(err, &pe):
			respondError(r, CodePending, pe.Ticket)
		case err != nil:
			respondError(r, "500", err.Error())
		default:
			_ = r.Respond([]byte(out)) // micro counts a failed response in its stats
		}
	}
}

// call runs handle, turning a panic into the call's failure rather than the
// server's end.
func call(ctx context.Context, name string, handle func(context.Context, Request) (string, error), req Request) (out string, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = "", fmt.Errorf("tool %q panicked: %v", name, v)
		}
	}()
	return handle(ctx, req)
}

// respondError puts the whole text in the body and a one-line version in the
// description header, which cannot hold line breaks.
func respondError(r micro.Request, code, text string) {
	_ = r.Error(code, oneLine(text), []byte(text))
}

func decodeRequest(r micro.Request, schema *jsonschema.Resolved) (Request, string) {
	h := nats.Header(r.Headers())
	req := Request{
		Args:           bytes.TrimSpace(r.Data()),
		IdempotencyKey: header(h, HeaderIdempotencyKey),
		CallID:         header(h, HeaderCallID),
		InDoubt:        header(h, HeaderInDoubt) == "true",
		Ticket:         header(h, HeaderCallTicket),
	}
	if len(req.Args) == 0 {
		req.Args = json.RawMessage("{}")
	}
	if a := header(h, HeaderAttempt); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 0 {
			return req, fmt.Sprintf("bad %s header %q", HeaderAttempt, a)
		}
		req.Attempt = n
	}
	if vs := headerValues(h, HeaderDecision); len(vs) > 0 {
		d := vs[0]
		if enc := header(h, HeaderDecisionEncoding); enc != "" {
			b, err := base64.StdEncoding.DecodeString(d)
			if enc != "base64" || err != nil {
				return req, fmt.Sprintf("bad %s header (encoding %q)", HeaderDecision, enc)
			}
			d = string(b)
		}
		req.Decision = &d
	}
	var inst any
	if err := json.Unmarshal(req.Args, &inst); err != nil {
		return req, "invalid arguments: malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	if err := schema.Validate(inst); err != nil {
		return req, "invalid arguments: " + err.Error()
	}
	return req, ""
}

func header(h nats.Header, key string) string {
	if vs := headerValues(h, key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// headerValues looks key up exactly, then regardless of case: nats.go's
// headers are case-sensitive, and people typing `nats req -H` are not.
func headerValues(h nats.Header, key string) []string {
	if vs, ok := h[key]; ok {
		return vs
	}
	for k, vs := range h {
		if strings.EqualFold(k, key) {
			return vs
		}
	}
	return nil
}
