package lash

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
)

// Durable work inside tool calls (ADR 0026): journaled steps, and waits
// for external events by signed keys.

// MaxStepBytes bounds a durable step's recorded result.
const MaxStepBytes = 64 << 10

// WithSecret sets the deployment's secret, at least 32 bytes; every node
// and operator of a deployment needs the same one. It signs the records the
// node writes, so that records no node or operator wrote are set aside
// (ADR 0036), and event keys (tools.EventKey). Without it the node signs
// and checks nothing, refuses a deployment whose records are signed, and
// tools.EventKey and tools.AwaitEvent fail.
func WithSecret(secret []byte) Option {
	return func(o *options) { o.secret = append([]byte(nil), secret...) }
}

// durable is the node's tools.Durable.
type durable struct{ n *Node }

func (n *Node) toolContext(ctx context.Context) context.Context {
	return tools.WithDurable(ctx, durable{n})
}

// scopeOf is what a call's steps and events are keyed by: its session and
// call id (call ids are unique in a session); host processes have no
// session.
func scopeOf(ctx context.Context) (scope, call string, err error) {
	info, ok := tools.Info(ctx)
	if !ok || info.Key.Call == "" {
		return "", "", errors.New("lash: durable work outside a tool call")
	}
	scope = info.Key.Session
	if scope == "" {
		scope = "_host"
	}
	return scope, info.Key.Call, nil
}

type stepRecord struct {
	V     int             `json:"v"`
	Value json.RawMessage `json:"value"`
	By    string          `json:"by"`
	At    time.Time       `json:"at"`
}

func (d durable) Step(ctx context.Context, id string, fn func(context.Context) (any, error)) (json.RawMessage, error) {
	n := d.n
	scope, call, err := scopeOf(ctx)
	if err != nil {
		return nil, err
	}
	subj, err := n.client.Subjects().EffectStep(scope, call, id)
	if err != nil {
		return nil, fmt.Errorf("lash: step %q: %w", id, err)
	}
	rec, at, err := n.stepAt(ctx, subj)
	if err == nil || !errors.Is(err, streams.ErrNotFound) {
		return rec, err
	}
	v, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	value, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("lash: step %q: result is not JSON: %w", id, err)
	}
	if len(value) > MaxStepBytes {
		return nil, fmt.Errorf("lash: step %q: result of %d bytes, at most %d", id, len(value), MaxStepBytes)
	}
	b, err := json.Marshal(stepRecord{V: 1, Value: value, By: n.runName, At: time.Now().UTC()})
	if err != nil {
		return nil, err
	}
	_, _, err = n.client.Append(ctx, streams.Publication{Subject: subj, Data: b}, at)
	var ce *streams.ConflictError
	if errors.As(err, &ce) {
		rec, _, err := n.stepAt(ctx, subj) // another attempt recorded it first: its result stands
		return rec, err
	}
	return value, err
}

// stepAt reads the step recorded on subj, and the subject's last sequence:
// a record no node wrote (ADR 0036) is passed over, and the step's own
// lands after it.
func (n *Node) stepAt(ctx context.Context, subj string) (json.RawMessage, uint64, error) {
	m, at, err := n.client.SignedHead(ctx, subj)
	if err != nil {
		return nil, at, err
	}
	var rec stepRecord
	if err := json.Unmarshal(m.Data, &rec); err != nil || rec.V != 1 {
		return nil, at, fmt.Errorf("lash: unreadable step record on %s", subj)
	}
	return rec.Value, at, nil
}

// eventID names a call's event: public, since it goes in subjects.
func eventID(scope, call, name string) string {
	sum := sha256.Sum256([]byte("lash.event\x00" + scope + "\x00" + call + "\x00" + name))
	return "ev-" + hex.EncodeToString(sum[:16])
}

func (n *Node) mac(parts ...string) (string, error) {
	if len(n.opts.secret) < 32 {
		return "", errors.New("lash: no deployment secret (WithSecret, lash-node --secret-file)")
	}
	h := hmac.New(sha256.New, n.opts.secret)
	h.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

func (d durable) EventKey(ctx context.Context, name string) (string, error) {
	scope, call, err := scopeOf(ctx)
	if err != nil {
		return "", err
	}
	id := eventID(scope, call, name)
	mac, err := d.n.mac("key", id)
	if err != nil {
		return "", err
	}
	return id + "." + mac, nil
}

// checkKey reports whether key is a key this deployment minted, and its
// event id. The comparison takes the same time for any wrong key.
func (n *Node) checkKey(key string) (string, bool) {
	id, sig, ok := strings.Cut(key, ".")
	want, err := n.mac("key", id)
	if !ok || err != nil || !strings.HasPrefix(id, "ev-") {
		return "", false
	}
	return id, hmac.Equal([]byte(sig), []byte(want))
}

// Resolution kinds.
const (
	resolvedEvent  = "resolved"
	timedOutEvent  = "timeout"
	cancelledEvent = "cancelled"
	revokedEvent   = "revoked"
)

type resolution struct {
	V     int             `json:"v"`
	Kind  string          `json:"kind"`
	Value json.RawMessage `json:"value,omitempty"`
	By    string          `json:"by"`
	At    time.Time       `json:"at"`
	// Signal is the stream sequence of the signal that resolved it.
	Signal uint64 `json:"signal,omitempty"`
}

func (d durable) AwaitEvent(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	n := d.n
	scope, call, err := scopeOf(ctx)
	if err != nil {
		return nil, err
	}
	id := eventID(scope, call, name)
	r, err := n.resolutionOf(ctx, id)
	if err == nil {
		switch r.Kind {
		case resolvedEvent:
			return r.Value, nil
		case timedOutEvent:
			return nil, tools.ErrEventTimeout
		case cancelledEvent:
			return nil, tools.ErrEventCancelled
		}
		return nil, tools.ErrEventRevoked
	}
	if !errors.Is(err, streams.ErrNotFound) {
		return nil, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout).UTC()
	}
	mac, err := n.mac("ticket", id, deadline.Format(time.RFC3339Nano))
	if err != nil {
		return nil, err
	}
	return nil, tools.Pending(builtin.FormatEventTicket(id, deadline, mac))
}

// validTicket reports whether an event ticket was written by a node of
// this deployment (any tool may write a ticket).
func (n *Node) validTicket(t builtin.Ticket) bool {
	mac, err := n.mac("ticket", t.Event, t.Deadline.UTC().Format(time.RFC3339Nano))
	return err == nil && hmac.Equal([]byte(mac), []byte(t.MAC))
}

func (n *Node) resolutionOf(ctx context.Context, id string) (*resolution, error) {
	subj, err := n.client.Subjects().EventResolution(id)
	if err != nil {
		return nil, err
	}
	m, _, err := n.client.SignedHead(ctx, subj)
	if err != nil {
		return nil, err
	}
	var r resolution
	if err := json.Unmarshal(m.Data, &r); err != nil || r.V != 1 {
		return nil, fmt.Errorf("lash: unreadable resolution on %s", subj)
	}
	return &r, nil
}

// resolve stores the event's one resolution, unless one is there, and
// wakes the call waiting for it, if it is parked.
func (n *Node) resolve(ctx context.Context, id string, r resolution) (first bool, err error) {
	subj, err := n.client.Subjects().EventResolution(id)
	if err != nil {
		return false, err
	}
	r.V, r.By, r.At = 1, n.runName, time.Now().UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return false, err
	}
	// The first resolution stands; what no node wrote is passed over, and
	// this one lands after it.
	var at uint64
	for try := 0; ; try++ {
		_, _, err = n.client.Append(ctx, streams.Publication{Subject: subj, Data: b}, at)
		var ce *streams.ConflictError
		if !errors.As(err, &ce) {
			break
		}
		var herr error
		if _, at, herr = n.client.SignedHead(ctx, subj); herr == nil {
			return false, n.wakeEvent(ctx, id)
		} else if !errors.Is(herr, streams.ErrNotFound) {
			return false, herr
		} else if try == 2 {
			return false, err // unsigned records kept landing first
		}
	}
	if err != nil {
		return false, err
	}
	return true, n.wakeEvent(ctx, id)
}

type eventWait struct {
	Session string `json:"session"`
	Call    string `json:"call"`
}

// wakeEvent wakes the call waiting for event id if it is parked and the
// event has its resolution: the call runs again and its AwaitEvent
// returns the resolution.
func (n *Node) wakeEvent(ctx context.Context, id string) error {
	subj, err := n.client.Subjects().EventWait(id)
	if err != nil {
		return err
	}
	m, _, err := n.client.SignedHead(ctx, subj)
	if errors.Is(err, streams.ErrNotFound) {
		return nil // resolved before anyone waits: AwaitEvent finds it
	}
	if err != nil {
		return err
	}
	var w eventWait
	if err := json.Unmarshal(m.Data, &w); err != nil {
		return fmt.Errorf("lash: unreadable event wait on %s", subj)
	}
	pc, found, _, err := n.parkedCall(ctx, w.Session, w.Call)
	if err != nil || !found || pc.ticket.Kind != builtin.EventTicket || pc.ticket.Event != id {
		return err // its recheck timer looks again once its turn commits
	}
	return n.wakeToRun(ctx, pc)
}

// wakeToRun resumes a parked call by running it again.
func (n *Node) wakeToRun(ctx context.Context, pc parkedCall) error {
	return n.resume(ctx, pc, Decision{ID: eventWakeID(pc.waits, pc.ticket.Event), CallID: pc.call.ID, Action: "resume", Mode: "replay"})
}

// eventWakeID names the wake of a call parked on an event: per event, as
// one call may wait for several in turn, each wake resuming it once.
func eventWakeID(call, event string) string { return wakeID(call + "/" + event) }

// resolveSignal takes a signal on <prefix>.signal.event.<id>: {"key": the
// signed key, "value": any JSON}. A key this deployment did not mint, or
// one for another id, is refused without a word on whether its event
// exists; a second resolution is refused (the first stands).
func (n *Node) resolveSignal(ctx context.Context, m *streams.Msg, id string) error {
	var body struct {
		Key   string          `json:"key"`
		Value json.RawMessage `json:"value"`
	}
	got, ok := "", false
	if err := json.Unmarshal(m.Data, &body); err == nil {
		got, ok = n.checkKey(body.Key)
	}
	if !ok || got != id {
		n.opts.logger.Warn("event resolution refused: not a key of this deployment", "subject", m.Subject, "seq", m.Seq)
		n.observe(Event{Kind: EventWake, Err: fmt.Errorf("%w: event resolution with an invalid key", ErrBadInput)})
		return nil
	}
	if len(body.Value) == 0 {
		body.Value = json.RawMessage("null")
	}
	first, err := n.resolve(ctx, id, resolution{Kind: resolvedEvent, Value: body.Value, Signal: m.Seq})
	if err == nil && !first {
		n.opts.logger.Info("event resolution refused: resolved already", "event", id, "seq", m.Seq)
	}
	return err
}

// EndEvent ends an event wait for an operator (by names them): cancelled
// (the tool sees tools.ErrEventCancelled), or revoked for good
// (tools.ErrEventRevoked). Like any resolution, only the first stands; it
// reports whether this one did. The waiting call, if any, gets the
// decision that runs it again.
func EndEvent(ctx context.Context, c *streams.Client, id string, revoke bool, by string) (bool, error) {
	kind := cancelledEvent
	if revoke {
		kind = revokedEvent
	}
	subj, err := c.Subjects().EventResolution(id)
	if err != nil {
		return false, fmt.Errorf("%w: event id: %v", ErrBadInput, err)
	}
	b, err := json.Marshal(resolution{V: 1, Kind: kind, By: by, At: time.Now().UTC()})
	if err != nil {
		return false, err
	}
	_, _, err = c.Append(ctx, streams.Publication{Subject: subj, Data: b}, 0)
	var ce *streams.ConflictError
	if err != nil && !errors.As(err, &ce) {
		return false, err
	}
	first := err == nil
	wsubj, _ := c.Subjects().EventWait(id)
	m, err := c.Head(ctx, wsubj)
	if errors.Is(err, streams.ErrNotFound) {
		return first, nil
	}
	if err != nil {
		return first, err
	}
	var w eventWait
	if err := json.Unmarshal(m.Data, &w); err != nil {
		return first, fmt.Errorf("lash: unreadable event wait on %s", wsubj)
	}
	// A decision for a call not (or no longer) parked is consumed without
	// a turn; the wake id makes it one with any node's wake.
	key := eventWakeID(w.Call, id)
	data, err := json.Marshal(Input{Decisions: []Decision{{ID: key, CallID: w.Call, Action: "resume", Mode: "replay"}}})
	if err != nil {
		return first, err
	}
	_, _, err = sessionlog.New(c).AppendDecision(ctx, w.Session, key, data)
	return first, err
}
