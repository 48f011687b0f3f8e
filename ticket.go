package lash

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// Call tickets let tools served outside the node (over NATS, in any
// language) do a call's durable work through the node API, as Go tools do
// through tools.Step, EventKey and AwaitEvent: the node signs a ticket
// naming the call's scope and id, and the node API writes and reads only
// that call's steps and events with it. What it writes is the node's own
// record, signed like any other (ADR 0036).

// ErrBadTicket: a call ticket this deployment did not sign.
var ErrBadTicket = errors.New("lash: not a call ticket of this deployment")

// CallTicket is tools.CallTicket for the node's calls: "ct1.<scope>.<call>.<mac>",
// scope and call in base64url.
func (d durable) CallTicket(ctx context.Context) (string, error) {
	scope, call, err := scopeOf(ctx)
	if err != nil {
		return "", err
	}
	mac, err := d.n.mac("call", scope, call)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding.EncodeToString
	return "ct1." + enc([]byte(scope)) + "." + enc([]byte(call)) + "." + mac, nil
}

// ticketContext is a context in which durable work is the ticket's call's.
func (n *Node) ticketContext(ctx context.Context, ticket string) (context.Context, error) {
	parts := strings.Split(ticket, ".")
	if len(parts) != 4 || parts[0] != "ct1" || len(ticket) > 1024 {
		return nil, ErrBadTicket
	}
	scope, err1 := base64.RawURLEncoding.DecodeString(parts[1])
	call, err2 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(call) == 0 {
		return nil, ErrBadTicket
	}
	want, err := n.mac("call", string(scope), string(call))
	if err != nil {
		return nil, fmt.Errorf("%w: the deployment has no secret, so no call has a ticket", ErrBadTicket)
	}
	if !hmac.Equal([]byte(want), []byte(parts[3])) {
		return nil, ErrBadTicket
	}
	key := turn.ReplayKey{Session: string(scope), Call: string(call)}
	if key.Session == "_host" {
		key.Session = ""
	}
	return n.toolContext(tools.NewContext(ctx, tools.CallInfo{Key: key})), nil
}

// TicketStep is the durable step id of the ticket's call: the recorded
// value when there is one (recorded false when value is nil and none is);
// otherwise value is recorded, unless another attempt recorded first,
// whose value stands.
func (n *Node) TicketStep(ctx context.Context, ticket, id string, value json.RawMessage) (out json.RawMessage, recorded bool, err error) {
	tctx, err := n.ticketContext(ctx, ticket)
	if err != nil {
		return nil, false, err
	}
	if value == nil {
		scope, call, _ := scopeOf(tctx)
		subj, err := n.client.Subjects().EffectStep(scope, call, id)
		if err != nil {
			return nil, false, fmt.Errorf("%w: step %q: %v", ErrBadInput, id, err)
		}
		v, _, err := n.stepAt(ctx, subj)
		if errors.Is(err, streams.ErrNotFound) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
	if !json.Valid(value) {
		return nil, false, fmt.Errorf("%w: step %q: the value is not JSON", ErrBadInput, id)
	}
	if len(value) > MaxStepBytes {
		return nil, false, fmt.Errorf("%w: step %q: a value of %d bytes, at most %d", ErrBadInput, id, len(value), MaxStepBytes)
	}
	v, err := durable{n}.Step(tctx, id, func(context.Context) (any, error) { return value, nil })
	return v, err == nil, err
}

// TicketEventKey is tools.EventKey for the ticket's call.
func (n *Node) TicketEventKey(ctx context.Context, ticket, name string) (string, error) {
	tctx, err := n.ticketContext(ctx, ticket)
	if err != nil {
		return "", err
	}
	return durable{n}.EventKey(tctx, name)
}

// TicketAwaitEvent is tools.AwaitEvent for the ticket's call: the event's
// value when it was resolved, its end (tools.ErrEventTimeout, ...), or the
// pending ticket the tool answers with to park the call (natstool.Pending).
func (n *Node) TicketAwaitEvent(ctx context.Context, ticket, name string, timeout time.Duration) (value json.RawMessage, pending string, err error) {
	tctx, err := n.ticketContext(ctx, ticket)
	if err != nil {
		return nil, "", err
	}
	v, err := durable{n}.AwaitEvent(tctx, name, timeout)
	if p := (*tools.PendingError)(nil); errors.As(err, &p) {
		return nil, p.Ticket, nil
	}
	return v, "", err
}
