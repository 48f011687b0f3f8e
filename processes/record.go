package processes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
)

// Event schema version, in every event: a reader refuses others.
const Version = 1

// Bounds. Every one is checked before anything is written.
const (
	// MaxEventTypes bounds the event types a registration declares.
	MaxEventTypes = 32
	// MaxTypeBytes bounds an event type's name.
	MaxTypeBytes = 64
	// MaxKeyBytes bounds an event's idempotency key.
	MaxKeyBytes = 256
	// MaxDataBytes bounds an event's data and a registration's input:
	// processes carry their payloads inline.
	MaxDataBytes = 64 << 10
	// MaxTextBytes bounds the free texts (reasons, labels, errors).
	MaxTextBytes = 4 << 10
	// MaxGrants bounds the sessions that hold grants on one process.
	MaxGrants = 64
	// MaxEvents bounds the events of one process; past it only a terminal
	// event, a new attempt or a cancel request is accepted, so a chatty
	// process can always be ended.
	MaxEvents = 10_000
)

// Built-in event types. Any other type must be declared at registration.
const (
	TypeRegistered       = "registered"
	TypeStarted          = "started"
	TypeReleased         = "released"
	TypeWaiting          = "waiting"
	TypeResumed          = "resumed"
	TypeCancelRequested  = "cancel_requested"
	TypeAbandonRequested = "abandon_requested"
	TypeGranted          = "granted"
	TypeRevoked          = "revoked"
	TypeCompleted        = "completed"
	TypeFailed           = "failed"
	TypeCancelled        = "cancelled"
	TypeAbandoned        = "abandoned"
)

// Keys of the built-in keyed events: one of each per process, so a
// repeated append is a no-op and a different one is refused.
const (
	KeyTerminal = "terminal"
	KeyCancel   = "cancel"
	KeyAbandon  = "abandon"
)

var builtin = map[string]bool{
	TypeRegistered: true, TypeStarted: true, TypeReleased: true, TypeWaiting: true, TypeResumed: true,
	TypeCancelRequested: true, TypeAbandonRequested: true, TypeGranted: true, TypeRevoked: true,
	TypeCompleted: true, TypeFailed: true, TypeCancelled: true, TypeAbandoned: true,
}

// Terminal reports whether events of type typ end a process.
func Terminal(typ string) bool {
	switch typ {
	case TypeCompleted, TypeFailed, TypeCancelled, TypeAbandoned:
		return true
	}
	return false
}

var typeRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]*$`)

// Errors. Each comes wrapped with the process id and what was refused.
var (
	// ErrUnknown: no process has that id.
	ErrUnknown = errors.New("processes: unknown process")
	// ErrInvalid: a malformed registration or event, refused before
	// anything was written.
	ErrInvalid = errors.New("processes: invalid")
	// ErrConflict: the id is registered with other content, or a keyed
	// event exists with other content.
	ErrConflict = errors.New("processes: conflict")
	// ErrTerminal: the process has ended; nothing more is appended.
	ErrTerminal = errors.New("processes: process has ended")
	// ErrFenced: a newer runner holds the process; this one must stop.
	ErrFenced = errors.New("processes: fenced by a newer runner")
	// ErrRefused: the process's disposition or state forbids the write
	// (starting an externally owned process, a second start of an
	// owner-bound one, a terminal without authority).
	ErrRefused = errors.New("processes: refused")
	// ErrCorrupt: the process's log holds an event this build cannot
	// read; the process is left as it is for an operator.
	ErrCorrupt = errors.New("processes: unreadable process log")
)

// Disposition says how a process may be recovered when its runner is gone.
type Disposition string

const (
	// Rerunnable work may be run again from its input by anyone.
	Rerunnable Disposition = "rerunnable"
	// OwnerBound work runs at most once: claimable until it starts, then
	// only its runner may end it, or recovery marks it abandoned on proof
	// of the runner's death or an operator's request.
	OwnerBound Disposition = "owner_bound"
	// ExternallyOwned work runs outside lash, which never executes it; its
	// owner reports its end.
	ExternallyOwned Disposition = "externally_owned"
)

// InputKind is what a process runs.
type InputKind string

const (
	// ToolCall is a prepared tool call run in the background.
	ToolCall InputKind = "tool_call"
	// SessionTurn is a turn of a child session (a sub-agent).
	SessionTurn InputKind = "session_turn"
	// External is work owned outside lash, named by an opaque reference.
	External InputKind = "external"
)

// Input is what a process runs. Only the fields of its kind are set.
type Input struct {
	Kind InputKind `json:"kind"`
	// ToolCall: the tool and its JSON arguments.
	Tool string          `json:"tool,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
	// SessionTurn: the child session, the task it is given, the tools it
	// may use (nil: all; empty: none but the process tools), and its depth
	// below the top-level session. omitzero keeps an empty list apart from
	// none.
	Session      string   `json:"session,omitempty"`
	Instructions string   `json:"instructions,omitempty"`
	Tools        []string `json:"tools,omitzero"`
	Depth        int      `json:"depth,omitempty"`
	// Agent is the agent the child session runs ("name" or "name@N";
	// empty: the deployment's default agent).
	Agent string `json:"agent,omitempty"`
	// Tree names the sub-agents started, at any depth, under one turn of
	// a top-level session, whose budget they share (TreeID, Reserve).
	Tree string `json:"tree,omitempty"`
	// External: the owner's reference to the work.
	ExternalRef string `json:"external_ref,omitempty"`
}

// Provenance says who started a process and why: a node (Host) or a
// session, and the turn effect that caused it, if any.
type Provenance struct {
	Host    string `json:"host,omitempty"`
	Session string `json:"session,omitempty"`
	Turn    string `json:"turn,omitempty"`
	Effect  uint64 `json:"effect,omitempty"`
	Call    string `json:"call,omitempty"`
}

// Registration is a process's first event: everything needed to run it,
// fixed for its life. Its hash makes registration idempotent.
type Registration struct {
	Input       Input       `json:"input"`
	Disposition Disposition `json:"disposition"`
	// EventTypes are the event types the process may emit besides the
	// built-in ones.
	EventTypes []string   `json:"event_types,omitempty"`
	Provenance Provenance `json:"provenance"`
	// WakeTarget, if set, is the session that gets an input when the
	// process ends.
	WakeTarget string `json:"wake_target,omitempty"`
	Label      string `json:"label,omitempty"`
}

// canonical returns reg with its free-form parts in one form, so equal
// content hashes equally: compact arguments, event types sorted once.
func (reg Registration) canonical() (Registration, error) {
	if len(reg.Input.Args) > 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, reg.Input.Args); err != nil {
			return reg, fmt.Errorf("%w: args are not JSON: %v", ErrInvalid, err)
		}
		reg.Input.Args = b.Bytes()
	}
	if len(reg.EventTypes) > 0 {
		ts := slices.Clone(reg.EventTypes)
		slices.Sort(ts)
		reg.EventTypes = slices.Compact(ts)
	}
	return reg, nil
}

// Hash is the hex sha256 of the registration's canonical JSON.
func (reg Registration) Hash() (string, error) {
	c, err := reg.canonical()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Validate reports the first thing wrong with reg, as ErrInvalid.
func (reg Registration) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w registration: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	in := reg.Input
	switch reg.Disposition {
	case Rerunnable, OwnerBound, ExternallyOwned:
	case "":
		return bad("a disposition is required (rerunnable, owner_bound or externally_owned)")
	default:
		return bad("unknown disposition %q", clip(string(reg.Disposition)))
	}
	switch in.Kind {
	case ToolCall:
		if err := streams.CheckID(in.Tool); err != nil {
			return bad("tool name: %v", err)
		}
		if len(in.Args) > 0 && !json.Valid(in.Args) {
			return bad("args are not JSON")
		}
	case SessionTurn:
		if err := streams.CheckID(in.Session); err != nil {
			return bad("child session: %v", err)
		}
		if in.Instructions == "" {
			return bad("a session turn needs instructions")
		}
		if in.Depth < 1 {
			return bad("a session turn's depth is at least 1, got %d", in.Depth)
		}
		if in.Tree != "" {
			if err := streams.CheckID(in.Tree); err != nil {
				return bad("tree: %v", err)
			}
		}
		for _, t := range in.Tools {
			if err := streams.CheckID(t); err != nil {
				return bad("tool name: %v", err)
			}
		}
	case External:
		if in.ExternalRef == "" || len(in.ExternalRef) > MaxTextBytes {
			return bad("an external process needs an external_ref of 1 to %d bytes", MaxTextBytes)
		}
		if reg.Disposition != ExternallyOwned {
			return bad("external work is externally_owned, not %s", reg.Disposition)
		}
	case "":
		return bad("an input kind is required (tool_call, session_turn or external)")
	default:
		return bad("unknown input kind %q", clip(string(in.Kind)))
	}
	if reg.Disposition == ExternallyOwned && in.Kind != External {
		return bad("only external work is externally_owned")
	}
	if n := len(in.Args) + len(in.Instructions) + len(in.ExternalRef); n > MaxDataBytes {
		return bad("input of %d bytes, at most %d", n, MaxDataBytes)
	}
	if len(in.Tools) > 256 {
		return bad("%d tools, at most 256", len(in.Tools))
	}
	if len(reg.EventTypes) > MaxEventTypes {
		return bad("%d event types, at most %d", len(reg.EventTypes), MaxEventTypes)
	}
	for _, t := range reg.EventTypes {
		if err := checkType(t); err != nil {
			return bad("%v", err)
		}
		if builtin[t] {
			return bad("event type %q is built in", t)
		}
	}
	p := reg.Provenance
	if (p.Host == "") == (p.Session == "") {
		return bad("provenance names a host or a session, not both or neither")
	}
	for _, id := range []string{p.Host, p.Session, p.Turn, p.Call, reg.WakeTarget} {
		if id != "" {
			if err := streams.CheckID(id); err != nil {
				return bad("%v", err)
			}
		}
	}
	if len(reg.Label) > MaxTextBytes {
		return bad("label of %d bytes, at most %d", len(reg.Label), MaxTextBytes)
	}
	return nil
}

func checkType(t string) error {
	if len(t) > MaxTypeBytes || !typeRE.MatchString(t) {
		return fmt.Errorf("event type %q: 1 to %d of a-z, 0-9, '_', '.', '-', starting with a letter", clip(t), MaxTypeBytes)
	}
	return nil
}

// Owner is a runner as events name it.
type Owner struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	Host        string `json:"host,omitempty"`
	Boot        string `json:"boot,omitempty"`
	PID         int    `json:"pid,omitempty"`
}

// OwnerOf names a node (its lease owner) in events.
func OwnerOf(o leases.Owner) Owner {
	return Owner{Node: o.ID, Incarnation: o.Incarnation, Host: o.Host, Boot: o.Boot, PID: o.PID}
}

// Lease is the node an event names, for liveness checks.
func (o Owner) Lease() leases.Owner {
	return leases.Owner{ID: o.Node, Incarnation: o.Incarnation, Host: o.Host, Boot: o.Boot, PID: o.PID}
}

// Start is the data of a started event: who runs this attempt, under
// which fencing token (one more than the newest on the log before it).
type Start struct {
	Owner   Owner  `json:"owner"`
	Attempt int    `json:"attempt"`
	Token   uint64 `json:"token"`
}

// Request is the data of a cancel or abandon request.
type Request struct {
	Reason string `json:"reason,omitempty"`
}

// Grant is the data of a granted or revoked event: the session that may
// (or may no longer) address the process; From, on a grant, is the session
// it was transferred from, whose grant ends.
type Grant struct {
	Session string `json:"session"`
	From    string `json:"from,omitempty"`
}

// Failure is the data of a failed event.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// AbandonWriter says who decided that a process was abandoned.
type AbandonWriter string

const (
	// OwnerDrain: the runner's own node, shutting down.
	OwnerDrain AbandonWriter = "owner_drain"
	// Sweep: recovery, on proof that the runner is gone (dead, or its own
	// node's word that it no longer runs the attempt).
	Sweep AbandonWriter = "sweep"
	// ReconciledRequest: recovery, on an abandon request, once no runner
	// runs the work.
	ReconciledRequest AbandonWriter = "reconciled_request"
	// GaveUp: recovery, after MaxAttempts attempts began and none ended.
	GaveUp AbandonWriter = "gave_up"
)

// Abandonment is the data of an abandoned event: the outcome is unknown,
// and this is who said so and on what evidence.
type Abandonment struct {
	Writer AbandonWriter `json:"writer"`
	// Owner is the runner that started the work, if one did.
	Owner *Owner `json:"owner,omitempty"`
	// Evidence says what allowed it: "liveness gone", "pid gone", or the
	// request's event number.
	Evidence string `json:"evidence"`
}

// Authority is what entitles a terminal write that carries no token.
type Authority string

const (
	// ByRunner: the runner of the newest attempt, or recovery taking over
	// from it (its token is on the event).
	ByRunner Authority = ""
	// ByExternalOwner: the owner of externally owned work reports its end.
	ByExternalOwner Authority = "external_owner"
	// ByReconciledRequest: recovery turns an abandon request into an
	// abandoned event once no runner runs the work.
	ByReconciledRequest Authority = "reconciled_request"
)

// Event is one entry of a process's log. N numbers the events of one
// process densely from 1 (the registration); Seq is the stream sequence,
// the head a writer expects.
type Event struct {
	V    int    `json:"v"`
	N    uint64 `json:"n"`
	Type string `json:"type"`
	// Key makes the event idempotent: at most one event per key, and a
	// repeat with the same content is a no-op.
	Key string `json:"key,omitempty"`
	// Token is the fencing token of the runner that wrote it, if a runner
	// (or recovery) did: the log refuses tokens older than the newest it
	// holds.
	Token     uint64          `json:"token,omitempty"`
	Authority Authority       `json:"authority,omitempty"`
	By        string          `json:"by"`
	At        time.Time       `json:"at"`
	Data      json.RawMessage `json:"data,omitempty"`
	// Hash of the registration, on the registered event only.
	Hash string `json:"hash,omitempty"`
	// Start, on a registration only, is the first attempt, begun by the
	// node that registered the process in the same write (its token is
	// the event's).
	Start *Start `json:"start,omitempty"`

	Seq uint64 `json:"-"`
}

// content is what makes two events with one key the same: type, key and
// data, not who wrote them or when.
func (e *Event) content() string {
	h := sha256.New()
	for _, p := range [][]byte{[]byte(e.Type), []byte(e.Key), e.Data} {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Decode reads one event as stored.
func Decode(data []byte, seq uint64) (Event, error) {
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("%w: event at sequence %d: %v", ErrCorrupt, seq, err)
	}
	if e.V != Version {
		return e, fmt.Errorf("%w: event at sequence %d has version %d, this build reads %d", ErrCorrupt, seq, e.V, Version)
	}
	e.Seq = seq
	return e, nil
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:64], len(s))
}
