package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/tools"
)

// Durable work of tools served over NATS: with the ticket a call's request
// carries (natstool.Request.Ticket, header Lash-Call-Ticket) a tool in any
// language records steps, mints event keys and parks on them, as Go tools
// do with tools.Step, EventKey and AwaitEvent. Grant these endpoints to
// tool servers: the ticket, signed by the node, names the one call they
// act for.
const (
	EndpointStep       = "step"
	EndpointEventKey   = "event_key"
	EndpointAwaitEvent = "await_event"
)

// StepRequest reads the call's step id (no value) or records it: a value
// another attempt recorded first stands, and is what is answered.
type StepRequest struct {
	Ticket string          `json:"ticket"`
	ID     string          `json:"id"`
	Value  json.RawMessage `json:"value,omitempty"`
}

func (r *StepRequest) missing() []string { return need(nil, "ticket", r.Ticket, "id", r.ID) }

// StepAnswer is a step's recorded value; recorded false when a read found
// none.
type StepAnswer struct {
	Recorded bool            `json:"recorded"`
	Value    json.RawMessage `json:"value,omitempty"`
}

// EventRequest names an event of the call: event_key mints its key,
// await_event waits for it (timeout_ms 0: no timeout).
type EventRequest struct {
	Ticket    string `json:"ticket"`
	Name      string `json:"name"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

func (r *EventRequest) missing() []string { return need(nil, "ticket", r.Ticket, "name", r.Name) }

// EventAnswer answers event_key (key) and await_event: the event's value
// (status "resolved"), its end ("timeout", "cancelled", "revoked"), or
// "pending" with the ticket the tool answers its call with to park it
// (natstool.Pending; the call runs again when the event comes).
type EventAnswer struct {
	Key     string          `json:"key,omitempty"`
	Status  string          `json:"status,omitempty"`
	Value   json.RawMessage `json:"value,omitempty"`
	Pending string          `json:"pending,omitempty"`
}

// maxEventWaitMS bounds an event wait's timeout: a year.
const maxEventWaitMS = 366 * 24 * 3600 * 1000

func ticketError(err error) error {
	if errors.Is(err, lash.ErrBadTicket) {
		return badRequest("%v", err)
	}
	return err
}

func (s *Server) step(ctx context.Context, data []byte) (any, error) {
	var req StepRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	v, ok, err := s.node.TicketStep(ctx, req.Ticket, req.ID, req.Value)
	if err != nil {
		return nil, ticketError(err)
	}
	return StepAnswer{Recorded: ok, Value: v}, nil
}

func (s *Server) eventKey(ctx context.Context, data []byte) (any, error) {
	var req EventRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	k, err := s.node.TicketEventKey(ctx, req.Ticket, req.Name)
	if err != nil {
		return nil, ticketError(err)
	}
	return EventAnswer{Key: k}, nil
}

func (s *Server) awaitEvent(ctx context.Context, data []byte) (any, error) {
	var req EventRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	if req.TimeoutMS < 0 || req.TimeoutMS > maxEventWaitMS {
		return nil, badRequest("timeout_ms %d: 0 (none) to %d", req.TimeoutMS, maxEventWaitMS)
	}
	v, pending, err := s.node.TicketAwaitEvent(ctx, req.Ticket, req.Name, time.Duration(req.TimeoutMS)*time.Millisecond)
	switch {
	case pending != "":
		return EventAnswer{Status: "pending", Pending: pending}, nil
	case errors.Is(err, tools.ErrEventTimeout):
		return EventAnswer{Status: "timeout"}, nil
	case errors.Is(err, tools.ErrEventCancelled):
		return EventAnswer{Status: "cancelled"}, nil
	case errors.Is(err, tools.ErrEventRevoked):
		return EventAnswer{Status: "revoked"}, nil
	case err != nil:
		return nil, ticketError(err)
	}
	return EventAnswer{Status: "resolved", Value: v}, nil
}

// Step reads (value nil) or records a step of the call the ticket names.
func (c *Client) Step(ctx context.Context, ticket, id string, value json.RawMessage) (StepAnswer, error) {
	var out StepAnswer
	return out, c.call(ctx, EndpointStep, StepRequest{Ticket: ticket, ID: id, Value: value}, &out)
}

// EventKey mints the key of the call's event name.
func (c *Client) EventKey(ctx context.Context, ticket, name string) (string, error) {
	var out EventAnswer
	err := c.call(ctx, EndpointEventKey, EventRequest{Ticket: ticket, Name: name}, &out)
	return out.Key, err
}

// AwaitEvent reads the call's event name: resolved, ended, or pending
// (answer the call with natstool.Pending(answer.Pending)).
func (c *Client) AwaitEvent(ctx context.Context, ticket, name string, timeout time.Duration) (EventAnswer, error) {
	var out EventAnswer
	return out, c.call(ctx, EndpointAwaitEvent, EventRequest{Ticket: ticket, Name: name, TimeoutMS: timeout.Milliseconds()}, &out)
}
