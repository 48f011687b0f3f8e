package lash

import (
	"time"

	"github.com/lash-run/lash/turn"
)

// EventKind says what a node did.
type EventKind uint8

// Event kinds.
const (
	// EventTurnCommitted: a turn was committed; Took is its run on this node.
	EventTurnCommitted EventKind = iota + 1
	// EventTurnFailed: a run stopped without committing; Err says why.
	EventTurnFailed
	// EventEffectExecuted: an effect was performed and recorded; Effect is
	// its kind, Took how long it ran.
	EventEffectExecuted
	// EventEffectReplayed: an effect was answered from the journal.
	EventEffectReplayed
	// EventLeaseClaimed, EventLeaseBusy, EventLeaseLost: a session lease was
	// taken, found held by another, or lost while running.
	EventLeaseClaimed
	EventLeaseBusy
	EventLeaseLost
	// EventCommitConflict: a commit was refused: fenced out, or a different
	// commit for the same turn.
	EventCommitConflict
	// EventWake: a parked call was woken by a signal or a timer; with Err
	// set, a signal was refused (not JSON, too large) or a signal or fired
	// timer was given up (its handling failed too often), and woke nothing.
	EventWake
	// EventTurnAborted: a turn that can never succeed was committed as
	// failed; Code says why (FailNondeterminism, ...), Err in full.
	EventTurnAborted
	// EventInputRefused: an input was consumed without a turn (unreadable,
	// or its key used for other content), or set aside undelivered (a
	// subject that names no session); Err says why.
	EventInputRefused
	// EventSettingsMismatch: a session's turn began under turn settings
	// this node does not run; it was left to a node that runs them.
	EventSettingsMismatch
	// EventTimerFired: a fired timer was handled; Session names its
	// session, Effect its kind ("sleep", "recheck", "cron"), Took the time
	// from when the server fired it until the node was done with it.
	EventTimerFired
	// EventModelCall: this node called a model (not a replay): Model names
	// it, Usage is its answer's, Code the error class of a failed call
	// ("" for an answer).
	EventModelCall
	// EventToolCall: this node ran a tool call: Tool names it, Code is
	// "ok", "error" or "pending".
	EventToolCall
	// EventTakeover: a run began a turn that earlier runs began and did
	// not finish (their node died or lost the session).
	EventTakeover
)

var eventNames = [...]string{"", "turn_committed", "turn_failed", "effect_executed", "effect_replayed",
	"lease_claimed", "lease_busy", "lease_lost", "commit_conflict", "wake", "turn_aborted", "input_refused",
	"settings_mismatch", "timer_fired", "model_call", "tool_call", "takeover"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k > 0 {
		return eventNames[k]
	}
	return "unknown"
}

// Event is something a node did, for metrics and logs.
type Event struct {
	Kind    EventKind
	Session string
	Turn    string
	// Effect is the effect's kind ("llm-call", "tool", ...) on effect events.
	Effect string
	// Code is a failed turn's code, on EventTurnAborted; a model error's
	// class, on EventModelCall; a tool call's status, on EventToolCall.
	Code string
	// Model and Usage, on EventModelCall; Tool, on EventToolCall.
	Model string
	Usage turn.Usage
	Tool  string
	Took  time.Duration
	Err   error
}

// WithObserver calls f for every Event. f runs on the node's goroutines, so
// it must be quick and safe for concurrent use.
func WithObserver(f func(Event)) Option { return func(o *options) { o.observer = f } }

func (n *Node) observe(ev Event) {
	if n.opts.observer != nil {
		n.opts.observer(ev)
	}
}
