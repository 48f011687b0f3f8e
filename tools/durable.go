package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Durable is what a node gives the tools it runs for work that must
// survive crashes inside one call: steps whose results are journaled, and
// waits for an external event by a key lash mints (ADR 0026). A tool
// reaches it through Step, EventKey and AwaitEvent.
type Durable interface {
	// Step runs fn once per call and step id: its JSON result is
	// journaled, and any later run of the call (a replay, a retry in
	// doubt, a resume) gets the recorded result without running fn. An
	// error from fn is not recorded: the step runs again next time.
	Step(ctx context.Context, id string, fn func(context.Context) (any, error)) (json.RawMessage, error)
	// EventKey mints the signed key an outsider resolves the call's event
	// name with. The same call and name give the same key.
	EventKey(ctx context.Context, name string) (string, error)
	// AwaitEvent returns the event's resolution if it came; otherwise it
	// parks the call (the tool returns the error it gets, a pending
	// result) until the event is resolved, times out (timeout > 0) or is
	// cancelled or revoked, and the call runs again.
	AwaitEvent(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error)
}

type durableKey struct{}

// WithDurable gives the tools called with ctx d.
func WithDurable(ctx context.Context, d Durable) context.Context {
	return context.WithValue(ctx, durableKey{}, d)
}

// Errors of durable work.
var (
	// ErrNoDurable: the tool runs where nothing is journaled (no node).
	ErrNoDurable = errors.New("tools: no durable context: the tool runs outside a node")
	// ErrEventTimeout, ErrEventCancelled, ErrEventRevoked end an
	// AwaitEvent without a value: the wait timed out, an operator
	// cancelled it, or its key was revoked for good.
	ErrEventTimeout   = errors.New("tools: event wait timed out")
	ErrEventCancelled = errors.New("tools: event wait cancelled")
	ErrEventRevoked   = errors.New("tools: event key revoked")
)

// CallTicket is the credential a tool served outside the node (over NATS)
// uses to do its call's durable work through the node API: the node signs
// it for the call, and the node API writes and reads only that call's
// steps and events with it. It fails where there is no durable context or
// no deployment secret.
func CallTicket(ctx context.Context) (string, error) {
	d, err := durableOf(ctx)
	if err != nil {
		return "", err
	}
	t, ok := d.(interface {
		CallTicket(context.Context) (string, error)
	})
	if !ok {
		return "", ErrNoDurable
	}
	return t.CallTicket(ctx)
}

func durableOf(ctx context.Context) (Durable, error) {
	d, ok := ctx.Value(durableKey{}).(Durable)
	if !ok {
		return nil, ErrNoDurable
	}
	return d, nil
}

// Step runs fn once per call and step id, journaling its result (see
// Durable.Step) and decoding it into T, recorded or fresh alike.
func Step[T any](ctx context.Context, id string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	d, err := durableOf(ctx)
	if err != nil {
		return zero, err
	}
	raw, err := d.Step(ctx, id, func(ctx context.Context) (any, error) { return fn(ctx) })
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return zero, fmt.Errorf("tools: step %q: recorded result does not decode: %w", id, err)
	}
	return v, nil
}

// EventKey mints the key of the call's event name (Durable.EventKey).
func EventKey(ctx context.Context, name string) (string, error) {
	d, err := durableOf(ctx)
	if err != nil {
		return "", err
	}
	return d.EventKey(ctx, name)
}

// AwaitEvent waits for the call's event name (Durable.AwaitEvent). A tool
// returns the error as it is when it is a pending result (IsPending).
func AwaitEvent(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	d, err := durableOf(ctx)
	if err != nil {
		return nil, err
	}
	return d.AwaitEvent(ctx, name, timeout)
}

// IsPending reports whether err parks the call (Pending).
func IsPending(err error) bool {
	var p *PendingError
	return errors.As(err, &p)
}
