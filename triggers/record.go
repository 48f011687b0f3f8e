package triggers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
)

// Version is the schema version of every record this package writes; a
// reader refuses others.
const Version = 1

// Bounds, each checked before anything is written.
const (
	// MaxKeyBytes bounds a subscription's key and an operation id.
	MaxKeyBytes = 256
	// MaxPatternTokens bounds the tokens of a source pattern.
	MaxPatternTokens = 16
	// MaxTextBytes bounds free texts (labels, instructions).
	MaxTextBytes = 4 << 10
	// MaxArgsBytes bounds a subscription's fixed tool arguments.
	MaxArgsBytes = 16 << 10
	// MaxFanOut bounds the deliveries of one occurrence. Subscriptions
	// past it (in id order) are listed in the occurrence as not delivered.
	MaxFanOut = 256
	// MaxRevisions bounds the states of one subscription; past it the
	// subscription takes no more changes (delete it and register anew
	// under another key).
	MaxRevisions = 1000
	// MaxSignalBytes bounds a signal's payload, as lash.MaxSignalBytes.
	MaxSignalBytes = 64 << 10
)

// Errors. Each comes wrapped with what was refused.
var (
	// ErrInvalid: a malformed subscription, operation or signal, refused
	// before anything was written.
	ErrInvalid = errors.New("triggers: invalid")
	// ErrConflict: the key is registered with another definition, or the
	// operation id was used for another operation.
	ErrConflict = errors.New("triggers: conflict")
	// ErrStale: the subscription is not at the revision the operation
	// names; read it again.
	ErrStale = errors.New("triggers: stale revision")
	// ErrNotFound: no subscription with that id in the caller's scope.
	ErrNotFound = errors.New("triggers: not found")
	// ErrDeleted: the subscription is deleted; only revive changes it.
	ErrDeleted = errors.New("triggers: subscription deleted")
	// ErrCorrupt: a record this build cannot read.
	ErrCorrupt = errors.New("triggers: unreadable record")
)

// OwnerKind says who owns a subscription.
type OwnerKind string

const (
	// Host subscriptions belong to the deployment: operators manage them.
	Host OwnerKind = "host"
	// Session subscriptions belong to one session; deleting the session
	// ends them.
	Session OwnerKind = "session"
)

// Owner owns a subscription. Host owners have no id.
type Owner struct {
	Kind OwnerKind `json:"kind"`
	ID   string    `json:"id,omitempty"`
}

func (o Owner) String() string {
	if o.Kind == Session {
		return "session " + o.ID
	}
	return string(o.Kind)
}

func (o Owner) validate() error {
	switch o.Kind {
	case Host:
		if o.ID != "" {
			return fmt.Errorf("%w: a host owner has no id", ErrInvalid)
		}
	case Session:
		if err := streams.CheckID(o.ID); err != nil {
			return fmt.Errorf("%w: owner session: %v", ErrInvalid, err)
		}
	default:
		return fmt.Errorf("%w: owner kind %q (want host or session)", ErrInvalid, o.Kind)
	}
	return nil
}

// Target is what a delivery starts: a process whose input is built from
// the target and the occurrence.
type Target struct {
	// Kind is processes.ToolCall or processes.SessionTurn.
	Kind processes.InputKind `json:"kind"`
	// ToolCall: the tool, its fixed JSON object of arguments, and the
	// argument that receives the occurrence (default "event"; "-" for
	// none, for tools whose schema takes no more): an Event.
	Tool       string          `json:"tool,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	PayloadArg string          `json:"payload_arg,omitempty"`
	// SessionTurn: a sub-agent's task; the occurrence is appended to it.
	// Each delivery runs in a child session of its own.
	Instructions string   `json:"instructions,omitempty"`
	Tools        []string `json:"tools,omitzero"`
}

// Spec is a subscription's definition: what it matches and what it
// starts.
type Spec struct {
	// SourceType is the first token after "<prefix>.signal." ("*" for
	// any), SourceKey the tokens after it as a NATS pattern ("*" one
	// token, ">" the rest; empty for signals with no key).
	SourceType string `json:"source_type"`
	SourceKey  string `json:"source_key,omitempty"`
	Start      Target `json:"start"`
	// WakeTarget, if set, is the session told when a delivery's process
	// ends.
	WakeTarget string `json:"wake_target,omitempty"`
	Label      string `json:"label,omitempty"`
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Pattern is the spec's source as one subject pattern below
// "<prefix>.signal.".
func (s Spec) Pattern() string {
	if s.SourceKey == "" {
		return s.SourceType
	}
	return s.SourceType + "." + s.SourceKey
}

func (s Spec) validate() error {
	if s.SourceType != "*" && !tokenRE.MatchString(s.SourceType) || len(s.SourceType) > 64 {
		return fmt.Errorf("%w: source type %q: one token of letters, digits, '_' and '-' (at most 64), or '*'", ErrInvalid, clip(s.SourceType))
	}
	if s.SourceKey != "" {
		toks := strings.Split(s.SourceKey, ".")
		if len(toks) > MaxPatternTokens || len(s.SourceKey) > MaxKeyBytes {
			return fmt.Errorf("%w: source key %q: at most %d tokens and %d bytes", ErrInvalid, clip(s.SourceKey), MaxPatternTokens, MaxKeyBytes)
		}
		for i, t := range toks {
			if t == "*" || t == ">" && i == len(toks)-1 || tokenRE.MatchString(t) {
				continue
			}
			return fmt.Errorf("%w: source key %q: token %q (letters, digits, '_', '-', '*', or '>' last)", ErrInvalid, clip(s.SourceKey), clip(t))
		}
	}
	if s.WakeTarget != "" {
		if err := streams.CheckID(s.WakeTarget); err != nil {
			return fmt.Errorf("%w: wake target: %v", ErrInvalid, err)
		}
	}
	if len(s.Label) > MaxTextBytes {
		return fmt.Errorf("%w: label of %d bytes, at most %d", ErrInvalid, len(s.Label), MaxTextBytes)
	}
	st := s.Start
	switch st.Kind {
	case processes.ToolCall:
		if err := streams.CheckID(st.Tool); err != nil {
			return fmt.Errorf("%w: tool: %v", ErrInvalid, err)
		}
		if len(st.Args) > MaxArgsBytes {
			return fmt.Errorf("%w: args of %d bytes, at most %d", ErrInvalid, len(st.Args), MaxArgsBytes)
		}
		if len(st.Args) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(st.Args, &obj); err != nil || obj == nil {
				return fmt.Errorf("%w: args must be a JSON object", ErrInvalid)
			}
		}
		if len(st.PayloadArg) > 64 {
			return fmt.Errorf("%w: payload argument name of %d bytes, at most 64", ErrInvalid, len(st.PayloadArg))
		}
		if st.Instructions != "" || st.Tools != nil {
			return fmt.Errorf("%w: a tool call target takes no instructions or tools", ErrInvalid)
		}
	case processes.SessionTurn:
		if st.Instructions == "" || len(st.Instructions) > MaxTextBytes {
			return fmt.Errorf("%w: a sub-agent target needs instructions of at most %d bytes", ErrInvalid, MaxTextBytes)
		}
		if st.Tool != "" || len(st.Args) > 0 || st.PayloadArg != "" {
			return fmt.Errorf("%w: a sub-agent target takes no tool, args or payload argument", ErrInvalid)
		}
		if len(st.Tools) > 64 {
			return fmt.Errorf("%w: %d tools, at most 64", ErrInvalid, len(st.Tools))
		}
		for _, name := range st.Tools {
			if err := streams.CheckID(name); err != nil {
				return fmt.Errorf("%w: tool: %v", ErrInvalid, err)
			}
		}
	default:
		return fmt.Errorf("%w: start kind %q (want %s or %s)", ErrInvalid, st.Kind, processes.ToolCall, processes.SessionTurn)
	}
	return nil
}

// canonical returns s with its JSON in one form, so equal definitions
// hash equally.
func (s Spec) canonical() (Spec, error) {
	if len(s.Start.Args) > 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, s.Start.Args); err != nil {
			return s, fmt.Errorf("%w: args are not JSON: %v", ErrInvalid, err)
		}
		s.Start.Args = b.Bytes()
	}
	return s, nil
}

// Hash is the hex sha256 of the spec's canonical JSON.
func (s Spec) Hash() string { return hashJSON(s) }

// Actions of subscription operations.
const (
	ActRegister = "register"
	ActUpdate   = "update"
	ActEnable   = "enable"
	ActDisable  = "disable"
	ActDelete   = "delete"
	ActRevive   = "revive"
)

// Subscription is one state of a subscription: its log on
// <prefix>.trig.sub.<id> holds one per change, the newest last.
type Subscription struct {
	V     int    `json:"v"`
	ID    string `json:"id"`
	Owner Owner  `json:"owner"`
	Key   string `json:"key"`
	Spec  Spec   `json:"spec"`
	// Revision numbers the states from 1; Incarnation from 1, moved by a
	// revive.
	Revision    uint64 `json:"revision"`
	Incarnation uint64 `json:"incarnation"`
	Enabled     bool   `json:"enabled"`
	Deleted     bool   `json:"deleted,omitempty"`
	// The change that made this state.
	Action string    `json:"action"`
	Op     string    `json:"op"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	// Seq is the state's stream sequence (not stored).
	Seq uint64 `json:"-"`
}

// Live reports whether the subscription matches occurrences.
func (s *Subscription) Live() bool { return s.Enabled && !s.Deleted }

// SubscriptionID derives a subscription's id from its owner and key: the
// same pair names the same subscription everywhere, forever.
func SubscriptionID(o Owner, key string) string {
	return "sub-" + hashJSON([]any{"lash.trigger-subscription", 1, o.Kind, o.ID, key})[:32]
}

// OccurrenceID derives an occurrence's id from its source and idempotency
// key: the same signal published twice is one occurrence, whenever.
func OccurrenceID(sourceType, sourceKey, idempotencyKey string) string {
	return "occ-" + hashJSON([]any{"lash.trigger-occurrence", 1, sourceType, sourceKey, idempotencyKey})[:32]
}

// DeliveryID derives a delivery's id (also its process's id) from the
// occurrence and the subscription's state it was matched against.
func DeliveryID(occurrence, subscription string, incarnation, revision uint64) string {
	return "dlv-" + hashJSON([]any{"lash.trigger-delivery", 1, occurrence, subscription, incarnation, revision})[:32]
}

// Op is one change to a subscription. ID names the operation: the same
// operation again returns its first receipt, whatever happened since.
type Op struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	// Register names the subscription by owner and key and gives its
	// spec; every other action names it by Subscription.
	Owner        Owner  `json:"owner,omitzero"`
	Key          string `json:"key,omitempty"`
	Spec         *Spec  `json:"spec,omitempty"`
	Subscription string `json:"subscription,omitempty"`
	// Revision, if not 0, is the revision the subscription must be at;
	// update requires it.
	Revision uint64 `json:"revision,omitempty"`
}

// Hash is the hex sha256 of the operation's canonical JSON.
func (op Op) Hash() string { return hashJSON(op) }

// Receipt is the outcome of an operation, stored under its id.
type Receipt struct {
	V            int    `json:"v"`
	Op           string `json:"op"`
	OpHash       string `json:"op_hash"`
	Action       string `json:"action"`
	Subscription string `json:"subscription"`
	// Revision and Incarnation of the state the operation left.
	Revision    uint64 `json:"revision"`
	Incarnation uint64 `json:"incarnation"`
	// Changed is false when the subscription already was as asked (a
	// register of the same spec, an enable of an enabled one).
	Changed bool      `json:"changed"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
}

// Occurrence is one event of a source, recorded once under its id on
// <prefix>.trig.occ.<id>, with the deliveries it was matched into.
type Occurrence struct {
	V              int             `json:"v"`
	ID             string          `json:"id"`
	SourceType     string          `json:"source_type"`
	SourceKey      string          `json:"source_key,omitempty"`
	IdempotencyKey string          `json:"idempotency_key"`
	Subject        string          `json:"subject"`
	Payload        json.RawMessage `json:"payload"`
	// Signal is the stream sequence of the signal it came from.
	Signal     uint64   `json:"signal"`
	Deliveries []string `json:"deliveries,omitempty"`
	// Undelivered lists matching subscriptions past MaxFanOut.
	Undelivered []string  `json:"undelivered,omitempty"`
	By          string    `json:"by"`
	At          time.Time `json:"at"`
}

// Delivery is one occurrence delivered to one subscription: the process
// it starts, fixed when it was reserved (the subscription's state then).
// Its subject <prefix>.trig.dlv.<id> holds the reservation and, once the
// process is registered, a started mark.
type Delivery struct {
	V            int                    `json:"v"`
	ID           string                 `json:"id"`
	Occurrence   string                 `json:"occurrence"`
	Subscription string                 `json:"subscription"`
	Incarnation  uint64                 `json:"incarnation"`
	Revision     uint64                 `json:"revision"`
	Process      string                 `json:"process"`
	Registration processes.Registration `json:"registration"`
	By           string                 `json:"by"`
	At           time.Time              `json:"at"`
	// Started is set once the process is registered (the started mark);
	// Failed, when its registration was refused for good (the mark says
	// why, and nothing starts it again).
	Started   bool      `json:"-"`
	Failed    string    `json:"-"`
	StartedAt time.Time `json:"-"`
	StartedBy string    `json:"-"`
	Seq       uint64    `json:"-"`
}

// startMark is a delivery's second message: its process was registered,
// or its registration was refused for good (Error).
type startMark struct {
	V       int       `json:"v"`
	Started bool      `json:"started"`
	Error   string    `json:"error,omitempty"`
	Process string    `json:"process"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
}

func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("triggers: hashing %T: %v", v, err)) // only plain data is hashed
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// clip keeps error texts about hostile input short.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:64], len(s))
}
