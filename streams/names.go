package streams

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadID: an id cannot be encoded into a subject token (it is empty or
// longer than MaxIDBytes), or a token is not the one Token makes.
var ErrBadID = errors.New("streams: invalid id")

// MaxIDBytes bounds every id that goes into a subject (sessions, calls,
// signal names, keys). Subjects travel in the NATS protocol's control line
// (4 KiB by default): an id without a bound lets one message make the
// server close the connection of whoever derives a subject from it.
const MaxIDBytes = 256

// maxTokenBytes is the longest token Token makes: '=' and the base64 of
// MaxIDBytes bytes.
var maxTokenBytes = 1 + base64.RawURLEncoding.EncodedLen(MaxIDBytes)

// CheckID reports why id cannot name anything in a subject, or nil.
func CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", ErrBadID)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: id of %d bytes, at most %d", ErrBadID, len(id), MaxIDBytes)
	}
	return nil
}

// Token encodes an id into one subject token that is also a valid KV key
// part. Ids made only of [A-Za-z0-9_-] are used as they are; any other id is
// '=' followed by its unpadded base64url encoding. Plain ids never contain
// '=', so the mapping is injective and readable for the common case. Ids
// over MaxIDBytes are refused.
func Token(id string) (string, error) {
	if err := CheckID(id); err != nil {
		return "", err
	}
	if plain(id) {
		return id, nil
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(id)), nil
}

// ParseToken reverses Token. It accepts only the token Token makes for the
// id: an encoded plain id ("=aGk" for "hi") or an over-long one is ErrBadID,
// so one id never has two subjects.
func ParseToken(tok string) (string, error) {
	if len(tok) > maxTokenBytes {
		return "", fmt.Errorf("%w: token of %d bytes, at most %d", ErrBadID, len(tok), maxTokenBytes)
	}
	id := tok
	if enc, ok := strings.CutPrefix(tok, "="); ok {
		b, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return "", fmt.Errorf("%w: token %q is not base64url", ErrBadID, clip(tok))
		}
		id = string(b)
	}
	canon, err := Token(id)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: token %q", ErrBadID, clip(tok))
	case canon != tok:
		return "", fmt.Errorf("%w: token %q is not the canonical token %q of its id", ErrBadID, clip(tok), clip(canon))
	}
	return id, nil
}

// clip keeps error texts about hostile ids short.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:64], len(s))
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func mustTokens(ids ...string) ([]string, error) {
	out := make([]string, len(ids))
	for i, id := range ids {
		t, err := Token(id)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// Subjects names every subject of one deployment. All methods encode ids
// with Token.
type Subjects struct{ prefix string }

// SessionEvents is the session's event log: fence markers, turn commits.
func (s Subjects) SessionEvents(session string) (string, error) {
	t, err := mustTokens(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".sess." + t[0] + ".ev", nil
}

// SessionInputs is where a session's clients append their messages.
func (s Subjects) SessionInputs(session string) (string, error) {
	t, err := mustTokens(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".sess." + t[0] + ".in", nil
}

// SessionDecisions is where a session's approvers append decisions on
// suspended calls and cancels: apart from SessionInputs, so the right to
// chat and the right to approve are granted separately.
func (s Subjects) SessionDecisions(session string) (string, error) {
	t, err := mustTokens(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".sess." + t[0] + ".decide", nil
}

// SessionInputChannels are the subjects a session's inputs arrive on:
// messages and decisions, one sequence between them (the stream's).
func (s Subjects) SessionInputChannels(session string) ([]string, error) {
	in, err := s.SessionInputs(session)
	if err != nil {
		return nil, err
	}
	return []string{in, in[:len(in)-len("in")] + "decide"}, nil
}

// SessionSnapshots holds full-state snapshots of the session's log, the
// newest last: a node that does not know the session starts from the
// newest and reads only the log after it.
func (s Subjects) SessionSnapshots(session string) (string, error) {
	t, err := mustTokens(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".sess." + t[0] + ".snap", nil
}

// SessionGone marks a deleted session, for read models that folded it: a
// purge leaves no message of its own.
func (s Subjects) SessionGone(session string) (string, error) {
	t, err := mustTokens(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".sess." + t[0] + ".gone", nil
}

// SessionEffects matches the whole journal of one session.
func (s Subjects) SessionEffects(session string) (string, error) {
	t, err := mustTokens(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".fx." + t[0] + ".>", nil
}

// SessionOf returns the session id of a session subject.
func (s Subjects) SessionOf(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".sess.")
	tok, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", fmt.Errorf("%w: %s is not a session subject", ErrBadID, clip(subject))
	}
	return ParseToken(tok)
}

// AllSessionInputs matches the inputs of every session: its messages and
// its decisions.
func (s Subjects) AllSessionInputs() []string {
	return []string{s.prefix + ".sess.*.in", s.prefix + ".sess.*.decide"}
}

// EffectRecord is the journal subject of one effect: the first message on
// it is the recorded outcome. call is empty for effects that are not one
// call of a batch.
func (s Subjects) EffectRecord(session, turn string, effect uint64, call string) (string, error) {
	return s.effect(session, turn, effect, call, "r")
}

// EffectIntent is where a "started" intent for the effect is noted.
func (s Subjects) EffectIntent(session, turn string, effect uint64, call string) (string, error) {
	return s.effect(session, turn, effect, call, "i")
}

// effect and Live run for every record and live event: Token one id at a
// time, without mustTokens' slice.
func (s Subjects) effect(session, turn string, effect uint64, call, leaf string) (string, error) {
	st, err := Token(session)
	if err != nil {
		return "", err
	}
	tt, err := Token(turn)
	if err != nil {
		return "", err
	}
	c := "_"
	if call != "" {
		if c, err = Token(call); err != nil {
			return "", err
		}
	}
	return s.prefix + ".fx." + st + "." + tt + "." + strconv.FormatUint(effect, 10) + "." + c + "." + leaf, nil
}

// TurnEffects matches every journal subject of one turn.
func (s Subjects) TurnEffects(session, turn string) (string, error) {
	t, err := mustTokens(session, turn)
	if err != nil {
		return "", err
	}
	return s.prefix + ".fx." + t[0] + "." + t[1] + ".>", nil
}

// TurnRecords matches the recorded outcomes of one turn, not its intents.
func (s Subjects) TurnRecords(session, turn string) (string, error) {
	t, err := mustTokens(session, turn)
	if err != nil {
		return "", err
	}
	return s.prefix + ".fx." + t[0] + "." + t[1] + ".*.*.r", nil
}

// SessionRecords matches the recorded outcomes of every turn of a session.
func (s Subjects) SessionRecords(session string) (string, error) {
	t, err := mustTokens(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".fx." + t[0] + ".*.*.*.r", nil
}

// TurnIntents matches the intents of one turn: the attempts its runs
// started.
func (s Subjects) TurnIntents(session, turn string) (string, error) {
	t, err := mustTokens(session, turn)
	if err != nil {
		return "", err
	}
	return s.prefix + ".fx." + t[0] + "." + t[1] + ".*.*.i", nil
}

// ProcessEvents is a process's record and event log.
func (s Subjects) ProcessEvents(process string) (string, error) {
	t, err := mustTokens(process)
	if err != nil {
		return "", err
	}
	return s.prefix + ".proc." + t[0] + ".ev", nil
}

// ProcessGone marks a process whose log was pruned, for read models that
// folded it: a purge leaves no message of its own.
func (s Subjects) ProcessGone(process string) (string, error) {
	t, err := mustTokens(process)
	if err != nil {
		return "", err
	}
	return s.prefix + ".proc." + t[0] + ".gone", nil
}

// ProcessTree holds the budget record of a tree of sub-agents.
func (s Subjects) ProcessTree(tree string) (string, error) {
	t, err := mustTokens(tree)
	if err != nil {
		return "", err
	}
	return s.prefix + ".proc." + t[0] + ".tree", nil
}

// AllProcessTrees matches the budget records of every tree of sub-agents.
func (s Subjects) AllProcessTrees() string { return s.prefix + ".proc.*.tree" }

// AllProcesses matches every process subject: logs, prune marks and the
// budgets of trees of sub-agents.
func (s Subjects) AllProcesses() string { return s.prefix + ".proc.>" }

// AllProcessEvents matches the logs of every process.
func (s Subjects) AllProcessEvents() string { return s.prefix + ".proc.*.ev" }

// ProcessOf returns the process id of a process subject.
func (s Subjects) ProcessOf(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".proc.")
	tok, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", fmt.Errorf("%w: %s is not a process subject", ErrBadID, clip(subject))
	}
	return ParseToken(tok)
}

// Signals matches every external signal.
func (s Subjects) Signals() string { return s.prefix + ".signal.>" }

// Hook is where the hook named name is served: core NATS request-reply,
// answered by the hook's servers (ADR 0038).
func (s Subjects) Hook(name string) string { return s.prefix + ".hook." + name }

// Live is the ephemeral subject for a session's live events.
func (s Subjects) Live(session string) (string, error) {
	t, err := Token(session)
	if err != nil {
		return "", err
	}
	return s.prefix + ".live." + t, nil
}

// SignalRest returns the part of a signal subject after "<prefix>.signal.".
func (s Subjects) SignalRest(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".signal.")
	return rest, ok && rest != ""
}

// Trigger subjects, on the TRIGGERS stream: a subscription's states, an
// operation's receipt, an occurrence, a delivery. Each is named by an id
// the triggers package derives.
func (s Subjects) TriggerSubscription(id string) (string, error) { return s.trig("sub", id) }
func (s Subjects) TriggerReceipt(op string) (string, error)      { return s.trig("op", op) }
func (s Subjects) TriggerOccurrence(id string) (string, error)   { return s.trig("occ", id) }
func (s Subjects) TriggerDelivery(id string) (string, error)     { return s.trig("dlv", id) }

func (s Subjects) trig(kind, id string) (string, error) {
	t, err := mustTokens(id)
	if err != nil {
		return "", err
	}
	return s.prefix + ".trig." + kind + "." + t[0], nil
}

// AllTriggers matches every trigger subject of one kind ("sub", "occ",
// "dlv", "op").
func (s Subjects) AllTriggers(kind string) string { return s.prefix + ".trig." + kind + ".*" }

// Timer subjects, on the TIMERS stream. A timer is a message schedule on
// TimerAt, which the server fires once at its time as a message on
// TimerDue; both name what the timer is for by kind and two ids (a
// session and a call, or a schedule's name and "_").
func (s Subjects) TimerAt(kind, a, b string) (string, error)  { return s.timer("at", kind, a, b) }
func (s Subjects) TimerDue(kind, a, b string) (string, error) { return s.timer("due", kind, a, b) }

func (s Subjects) timer(leaf, kind, a, b string) (string, error) {
	t, err := mustTokens(kind, a, b)
	if err != nil {
		return "", err
	}
	return s.prefix + ".timer." + leaf + "." + t[0] + "." + t[1] + "." + t[2], nil
}

// AllTimersDue matches every fired timer.
func (s Subjects) AllTimersDue() string { return s.prefix + ".timer.due.>" }

// TimerOf returns the kind and ids a timer subject (at or due) names.
func (s Subjects) TimerOf(subject string) (kind, a, b string, err error) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".timer.")
	toks := strings.Split(rest, ".")
	if !ok || len(toks) != 4 || toks[0] != "at" && toks[0] != "due" {
		return "", "", "", fmt.Errorf("%w: %s is not a timer subject", ErrBadID, clip(subject))
	}
	var ids [3]string
	for i, tok := range toks[1:] {
		if ids[i], err = ParseToken(tok); err != nil {
			return "", "", "", err
		}
	}
	return ids[0], ids[1], ids[2], nil
}

// SignalWait indexes a call parked until a signal on signalSubject, by
// the subject's hash; SignalWaits matches every wait on one subject.
func (s Subjects) SignalWait(signalSubject, session, call string) (string, error) {
	t, err := mustTokens(session, call)
	if err != nil {
		return "", err
	}
	return s.SignalWaitsPrefix(signalSubject) + t[0] + "." + t[1], nil
}

// SignalWaitsPrefix is the subject prefix of every wait on one signal
// subject (add ">" to match them).
func (s Subjects) SignalWaitsPrefix(signalSubject string) string {
	sum := sha256.Sum256([]byte(signalSubject))
	return s.prefix + ".timer.wait." + hex.EncodeToString(sum[:16]) + "."
}

// SignalWaitOf returns the session and call a signal wait subject names.
func (s Subjects) SignalWaitOf(subject string) (session, call string, err error) {
	toks := strings.Split(subject, ".")
	if len(toks) < 2 {
		return "", "", fmt.Errorf("%w: %s is not a signal wait subject", ErrBadID, clip(subject))
	}
	if session, err = ParseToken(toks[len(toks)-2]); err != nil {
		return "", "", err
	}
	call, err = ParseToken(toks[len(toks)-1])
	return session, call, err
}

// EventSignal is where an outsider resolves the event id.
func (s Subjects) EventSignal(id string) (string, error) {
	t, err := mustTokens(id)
	if err != nil {
		return "", err
	}
	return s.prefix + ".signal.event." + t[0], nil
}

// SessionTimers match a session's timers: their schedules, the messages
// they fired, and the index of its signal waits.
func (s Subjects) SessionTimers(session string) []string {
	t, err := Token(session)
	if err != nil {
		return nil
	}
	p := s.prefix + ".timer."
	return []string{p + "at.*." + t + ".*", p + "due.*." + t + ".*", p + "wait.*." + t + ".*"}
}

// EventResolution holds the one resolution of an event wait; EventWait
// names the call waiting for it (ADR 0026).
func (s Subjects) EventResolution(id string) (string, error) { return s.trig("res", id) }
func (s Subjects) EventWait(id string) (string, error)       { return s.trig("await", id) }

// EffectStep is the journal subject of a durable step of a tool call:
// scope is the call's session (or "_host"), call its id, step the tool's
// name for the step. The first message is the recorded result.
func (s Subjects) EffectStep(scope, call, step string) (string, error) {
	t, err := mustTokens(scope, call, step)
	if err != nil {
		return "", err
	}
	return s.prefix + ".fx." + t[0] + ".steps." + t[1] + "." + t[2], nil
}

// AllEffects matches every journal subject: records, intents and steps.
func (s Subjects) AllEffects() string { return s.prefix + ".fx.>" }

// AllTimers matches every timer subject: schedules, fired timers and the
// index of signal waits.
func (s Subjects) AllTimers() string { return s.prefix + ".timer.>" }

// AllSessionMarks matches the deletion marks of sessions.
func (s Subjects) AllSessionMarks() string { return s.prefix + ".sess.*.gone" }

// Agent is the subject of an agent's definitions; name is its own token
// (agents.CheckName).
func (s Subjects) Agent(name string) (string, error) {
	t, err := mustTokens(name)
	if err != nil {
		return "", err
	}
	return s.prefix + ".agent." + t[0], nil
}

// AllAgents matches the definitions of every agent.
func (s Subjects) AllAgents() string { return s.prefix + ".agent.*" }

// AllProcessMarks matches the prune marks of processes.
func (s Subjects) AllProcessMarks() string { return s.prefix + ".proc.*.gone" }

// RecordTurn returns the session and turn of a journal record's subject
// (<prefix>.fx.<session>.<turn>.<effect>.<call>.r).
func (s Subjects) RecordTurn(subject string) (session, turn string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.prefix+".fx.")
	toks := strings.Split(rest, ".")
	if !found || len(toks) != 5 || toks[4] != "r" || toks[1] == "steps" {
		return "", "", false
	}
	var err error
	if session, err = ParseToken(toks[0]); err != nil {
		return "", "", false
	}
	if turn, err = ParseToken(toks[1]); err != nil {
		return "", "", false
	}
	return session, turn, true
}

// StepOf returns the scope and call of a durable step's subject
// (<prefix>.fx.<scope>.steps.<call>.<step>).
func (s Subjects) StepOf(subject string) (scope, call string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.prefix+".fx.")
	toks := strings.Split(rest, ".")
	if !found || len(toks) != 4 || toks[1] != "steps" {
		return "", "", false
	}
	var err error
	if scope, err = ParseToken(toks[0]); err != nil {
		return "", "", false
	}
	if call, err = ParseToken(toks[2]); err != nil {
		return "", "", false
	}
	return scope, call, true
}
