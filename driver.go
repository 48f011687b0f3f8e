package lash

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// ErrLeaseLost: the node lost the session's lease while running a turn;
// nothing of the turn was committed by this node.
var ErrLeaseLost = errors.New("lash: session lease lost")

// ErrSettingsMismatch: the session's next turn began under turn settings
// this node does not run, and a live node runs them: that node replays it.
var ErrSettingsMismatch = errors.New("lash: turn began under other turn settings")

// TurnResult is one committed turn.
type TurnResult struct {
	Turn string
	Seq  uint64 // the commit's revision on the session log
	// Cursor is the last input the turn consumed.
	Cursor  uint64
	Outcome turn.Outcome
	// Executed counts effects this node performed; Replayed those it took
	// from the journal.
	Executed, Replayed int
}

// Run runs the session's pending inputs as turns, one after another, until
// none is left, and returns the turns it committed. It holds the session's
// lease meanwhile; a session run elsewhere is ErrBusy. A run that fails
// returns an *AttemptError when the turn will be tried again.
func (s *Session) Run(ctx context.Context) ([]TurnResult, error) {
	results, _, err := s.run(ctx)
	return results, err
}

// run is Run, also returning the session's input cursor when it stopped:
// every input up to it is consumed.
func (s *Session) run(ctx context.Context) (_ []TurnResult, _ uint64, err error) {
	n := s.n
	if err := streams.CheckID(s.id); err != nil {
		return nil, 0, fmt.Errorf("%w: session: %v", ErrBadInput, err)
	}
	defer func() { n.health.ran(err) }()
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return nil, 0, ErrClosed
	}
	if _, ok := n.running[s.id]; ok {
		n.mu.Unlock()
		return nil, 0, fmt.Errorf("%w: %s runs on this node", ErrBusy, s.id)
	}
	ended := make(chan struct{})
	n.running[s.id] = ended
	n.runs.Add(1)
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.running, s.id)
		close(ended)
		n.mu.Unlock()
		n.runs.Done()
	}()
	// A drain that runs out of time stops the turn like its caller would;
	// a lapse of the node's liveness, like the loss of its lease.
	ctx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	defer context.AfterFunc(n.halt, func() { cancelRun(nil) })()
	alive := n.alive.context()
	defer context.AfterFunc(alive, func() { cancelRun(context.Cause(alive)) })()

	key, err := leases.Key("sess", s.id)
	if err != nil {
		return nil, 0, err
	}
	lease, err := n.leases.Claim(ctx, key, n.opts.leaseTTL)
	if errors.Is(err, leases.ErrBusy) {
		n.observe(Event{Kind: EventLeaseBusy, Session: s.id})
		return nil, 0, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if cause := context.Cause(alive); err != nil && cause != nil {
		return nil, 0, cause
	}
	if err != nil {
		return nil, 0, err
	}
	n.observe(Event{Kind: EventLeaseClaimed, Session: s.id})
	if err := s.boundary("lease"); err != nil {
		return nil, 0, err
	}
	// The run stops trusting the lease at its expiry (leases.Keep): a
	// renewal that gets no answer by then stops it, before another node
	// may take the session.
	ctx, stopRenewing := n.leases.Keep(ctx, lease, func(err error) {
		n.opts.logger.Warn("renewing a session lease; trying again", "session", s.id, "err", err)
	})
	defer stopRenewing()
	results, cursor, err := s.runTurns(ctx, lease)
	stopRenewing()
	if rerr := n.leases.Release(context.WithoutCancel(ctx), lease); rerr != nil && !errors.Is(rerr, leases.ErrLost) {
		n.opts.logger.Warn("releasing a session lease", "session", s.id, "err", rerr)
	}
	if err == nil {
		err = s.boundary("after-release")
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && errors.Is(cause, leases.ErrLost) {
		err = fmt.Errorf("%w: %w", ErrLeaseLost, cause)
		n.opts.logger.Warn("session lease lost mid-run; another node finishes the turn", "session", s.id, "err", err)
		n.observe(Event{Kind: EventLeaseLost, Session: s.id, Err: err})
	}
	if err != nil && !errors.Is(err, ErrSettingsMismatch) {
		n.observe(Event{Kind: EventTurnFailed, Session: s.id, Err: err})
		s.publishLive("", live.Event{Type: live.TypeTurnFailed, Error: err.Error()})
	}
	return results, cursor, err
}

// deletedSince says whether the session was deleted after revision rev:
// its mark (ADR 0023) stands after it.
func (s *Session) deletedSince(ctx context.Context, rev uint64) (bool, error) {
	gone, err := s.n.client.Subjects().SessionGone(s.id)
	if err != nil {
		return false, err
	}
	m, err := s.n.client.Head(ctx, gone)
	if errors.Is(err, streams.ErrNotFound) {
		return false, nil
	}
	return err == nil && m.Seq > rev, err
}

func (s *Session) runTurns(ctx context.Context, lease *leases.Lease) ([]TurnResult, uint64, error) {
	n := s.n
	// The state this node kept from its last run of the session, if any.
	// It is trusted without reading the log: the fence's compare-and-set
	// fails if anything was written since, and the run then reads only what
	// was. The state goes back when the run ends, a fold of the log through
	// st.rev whatever happened.
	st := n.states.take(s.id)
	kept := st != nil
	if !kept {
		st = s.fromSnapshot(ctx)
	}
	defer n.states.put(st)
	var next *sessionlog.Input
	var f *failure
	var recorded []*effectlog.Record
	var pos sessionlog.Position
	var b binding
	var first screened
	for try := 0; ; try++ {
		if try > 0 && st.rev > 0 {
			// The log moved under the state: if the session was deleted
			// since, what the state holds is gone for good (ADR 0023).
			if deleted, err := s.deletedSince(ctx, st.rev); err != nil {
				return nil, st.cursor, err
			} else if deleted {
				n.opts.logger.Info("session state passed over: the session was deleted since", "session", s.id, "revision", st.rev)
				*st = *newState(s.id)
			}
		}
		if !kept || try > 0 {
			before := st.rev
			if err := s.fold(ctx, st); err != nil {
				return nil, st.cursor, err
			}
			if try > 0 && st.rev == before {
				// The fence found the log elsewhere, yet nothing follows
				// the state's revision: the state is not of this log (its
				// stream was made anew). Start from nothing.
				n.opts.logger.Warn("session state passed over: the log does not follow it", "session", s.id, "revision", before)
				*st = *newState(s.id)
				if err := s.fold(ctx, st); err != nil {
					return nil, st.cursor, err
				}
			}
		}
		var err error
		if next, err = s.nextInput(ctx, st.cursor); err != nil || next == nil {
			// Nothing to run: no fence, so idle runs cost no attempt.
			return nil, st.cursor, err
		}
		first = s.screenNext(st, next)
		if b, err = s.bind(ctx, st, next, first); err != nil {
			return nil, st.cursor, err
		}
		f, recorded = nil, nil
		if !st.fresh(b.p.fingerprint[:]) {
			// Only a turn some run began can have a journal; what it
			// recorded says which settings the turn runs under.
			var p *profile
			if p, f, recorded, err = s.checkSettings(ctx, next, b.p); err != nil {
				return nil, st.cursor, err
			}
			if p != nil {
				// The turn began under a version this node runs: it ends
				// under it, whatever became of its agent since.
				b.p, b.fail, b.missing = p, nil, nil
				if b.refuse != "" && b.asked != "" && p.Agent == agents.Name(b.asked) {
					b.refuse, b.spec = "", b.asked
				}
			}
		}
		if f == nil && b.missing != nil && b.refuse == "" {
			if f, err = s.unrunnable(ctx, b.missing, next); err != nil {
				return nil, st.cursor, err
			}
		}
		if f == nil {
			f = b.fail
		}
		pos, err = b.p.log.FenceAfter(ctx, s.id, lease.Token, n.runName, st.rev, st.newest, st.setAside...)
		if err == nil {
			st.setAside = nil
			break
		}
		if !errors.Is(err, streams.ErrConflict) {
			return nil, st.cursor, err
		}
		if try == 3 {
			return nil, st.cursor, fmt.Errorf("lash: session %s: fence: the log kept moving: %w", s.id, err)
		}
		// Written since st.rev (by an older holder, or another node since
		// this one kept the state): read it and decide again.
	}
	attempt, fresh := st.attempts+1, st.fresh(b.p.fingerprint[:])
	if attempt > 1 {
		n.opts.logger.Info("taking over a turn other runs began", "session", s.id, "turn", turnID(next.Seq), "attempt", attempt,
			"runs", st.runs)
		n.observe(Event{Kind: EventTakeover, Session: s.id, Turn: turnID(next.Seq)})
	}
	if pos.Seq() == st.rev {
		// The log ends with this token's own write: the lease came back
		// with the token of a run of this node whose release did not land.
		// This run still marks that it began the turn, or a crash in it
		// would leave the turn looking fresh.
		var err error
		if pos, err = b.p.log.Refence(ctx, pos, n.runName); err != nil {
			return nil, st.cursor, err
		}
	}
	st.fenced(pos.Seq(), pos.Token(), n.runName)
	if err := s.boundary("fence"); err != nil {
		return nil, st.cursor, err
	}
	var results []TurnResult
	for next != nil {
		var err error
		use, in, take := first.use, first.in, first.take
		if take && b.refuse != "" {
			use.Refused, take = b.refuse, false
		}
		if !take {
			if pos, err = s.consume(ctx, b.p, pos, st, use); err != nil {
				return results, st.cursor, err
			}
		} else {
			t := &turnRun{input: next, in: in, use: use, attempt: attempt, failure: f, recorded: recorded, fresh: fresh,
				p: b.p, agent: b.spec}
			r, err := s.runTurn(ctx, pos, st, t)
			if err != nil {
				return results, st.cursor, err
			}
			pos = t.pos
			results = append(results, *r)
		}
		if next, err = s.nextInput(ctx, st.cursor); err != nil || next == nil {
			return results, st.cursor, err
		}
		first = s.screenNext(st, next)
		if b, err = s.bind(ctx, st, next, first); err != nil {
			return results, st.cursor, err
		}
		// The next turn is fresh: this run committed the last one.
		f = b.fail
		if f == nil && b.missing != nil && b.refuse == "" {
			if f, err = s.unrunnable(ctx, b.missing, next); err != nil {
				return results, st.cursor, err
			}
		}
		// Going on: the fence says a run began the next turn, so that
		// whoever runs it after a crash reads what this run recorded.
		if pos, err = b.p.log.Refence(ctx, pos, n.runName); err != nil {
			return results, st.cursor, err
		}
		st.fenced(pos.Seq(), pos.Token(), n.runName)
		attempt, recorded, fresh = 1, nil, true
	}
	return results, st.cursor, nil
}

// screened is what screen made of the input that starts a turn: read
// once, before its fence, for both the binding and the turn.
type screened struct {
	use  sessionlog.InputUse
	in   Input
	take bool
}

func (s *Session) screenNext(st *state, next *sessionlog.Input) screened {
	use, in, take := screen(st, nil, *next, true, s.n.vouched)
	return screened{use: use, in: in, take: take}
}

// nextInput returns the first input after cursor, or nil: one read, from
// the stream's leader.
func (s *Session) nextInput(ctx context.Context, cursor uint64) (*sessionlog.Input, error) {
	in, err := s.n.log.InputAfter(ctx, s.id, cursor)
	if errors.Is(err, streams.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &in, nil
}

// checkSettings looks at the journal of a turn some run began: a turn
// runs to its commit under the settings it began with (an agent's version
// updated since included), here when this node can run them (the profile
// it returns, when not want). Otherwise it is left to a live node that
// runs them (its replay asks what was recorded); with none alive it can
// never finish and is failed. It returns the records it read, for the
// turn to use.
func (s *Session) checkSettings(ctx context.Context, next *sessionlog.Input, want *profile) (*profile, *failure, []*effectlog.Record, error) {
	n := s.n
	recs, err := n.journal.Load(ctx, s.id, turnID(next.Seq))
	if err != nil {
		if f, ok := asFailure(err); ok {
			return nil, f, nil, nil
		}
		return nil, nil, nil, err
	}
	var other []byte
	for _, r := range recs {
		if len(r.Settings) != 0 && !bytes.Equal(r.Settings, want.fingerprint[:]) {
			other = r.Settings
			break
		}
	}
	if other == nil {
		return nil, nil, recs, nil
	}
	p, set, err := n.profileByFingerprint(ctx, other)
	switch {
	case errors.Is(err, streams.ErrNotFound) || errors.Is(err, ErrBadInput) || errors.Is(err, streams.ErrCorrupt) || errors.Is(err, streams.ErrTooLarge):
		set = &Settings{} // settings no node can read: none runs them
	case err != nil:
		return nil, nil, nil, err
	case p != nil:
		return p, nil, recs, nil
	}
	if err := s.leaveTo(ctx, *set, other, next); err != nil {
		return nil, nil, nil, err
	}
	fp := hex.EncodeToString(other)
	return nil, &failure{code: FailSettingsChanged, err: fmt.Errorf("the turn began under turn settings %s, which no live node runs; this node runs %s",
		fp[:12], n.settings.short())}, nil, nil
}

// consume appends a consume entry for an input that starts no turn.
func (s *Session) consume(ctx context.Context, p *profile, pos sessionlog.Position, st *state, use sessionlog.InputUse) (sessionlog.Position, error) {
	n := s.n
	body := &sessionlog.ConsumeBody{Inputs: []sessionlog.InputUse{use}, InputCursor: use.Seq}
	data, err := sessionlog.EncodeConsumeBody(body)
	if err != nil {
		return pos, err
	}
	if pos, err = p.log.Consume(ctx, pos, turnID(use.Seq), data); err != nil {
		return pos, err
	}
	st.consumed(pos.Seq(), pos.Token(), p.fingerprint[:], body)
	s.publishLive(turnID(use.Seq), live.Event{Type: live.TypeInputConsumed, Cursor: use.Seq, Error: use.Refused})
	if use.Refused != "" {
		n.opts.logger.Warn("input refused: consumed without a turn", "session", s.id, "seq", use.Seq, "reason", use.Refused)
		n.observe(Event{Kind: EventInputRefused, Session: s.id, Err: errors.New(use.Refused)})
	}
	return pos, nil
}

// turnRun is one turn's run within a session run.
type turnRun struct {
	input   *sessionlog.Input
	in      Input
	use     sessionlog.InputUse
	attempt int
	// failure, when set, is committed instead of running the turn.
	failure *failure
	// recorded is the turn's journal, when it was read already; fresh
	// says it is known to be empty.
	recorded []*effectlog.Record
	fresh    bool
	pos      sessionlog.Position
	// p is what the turn runs under, and agent the session's agent after
	// it (binding.spec).
	p     *profile
	agent string
}

// turnID names the turn of an input: stable on every node.
func turnID(input uint64) string { return fmt.Sprintf("in-%d", input) }

// runTurn runs one turn and commits it, or commits it failed when it can
// never succeed.
func (s *Session) runTurn(ctx context.Context, pos sessionlog.Position, st *state, t *turnRun) (res *TurnResult, err error) {
	n := s.n
	id := turnID(t.input.Seq)
	began := time.Now()
	d := &drive{s: s, p: t.p, agent: t.agent, turn: id, cursor: t.input.Seq, inputs: []sessionlog.InputUse{t.use}, fresh: t.fresh}
	ctx, span := tracerOf(&n.opts).Start(ctx, "lash.turn", trace.WithAttributes(attrSession.String(s.id), attrTurn.String(id),
		attrNode.String(n.runName), attrAttempt.Int(t.attempt)))
	defer func() {
		span.SetAttributes(attribute.Int("lash.executed", d.executed), attribute.Int("lash.replayed_effects", d.replayed))
		if res != nil {
			span.SetAttributes(attribute.String("lash.status", res.Outcome.Status.String()),
				attribute.String("lash.termination", res.Outcome.Termination.String()))
		}
		endSpan(span, err)
	}()
	f := t.failure
	if f == nil && t.attempt > n.turnAttempts() {
		f = &failure{code: FailAttempts, err: fmt.Errorf("%d runs began this turn and none finished it; the last stopped without a recorded cause (its node stopped or crashed)", t.attempt-1)}
	}
	var out turn.Outcome
	if f == nil {
		var err error
		out, err = d.run(ctx, st, t.in, t.recorded)
		if err != nil {
			var ok bool
			switch f, ok = asFailure(err); {
			case ok:
			case ctx.Err() != nil:
				return nil, err // stopped from outside: the next holder goes on
			case t.attempt >= n.turnAttempts():
				f = &failure{code: FailAttempts, err: fmt.Errorf("attempt %d of %d: %w", t.attempt, n.turnAttempts(), err)}
			default:
				return nil, &AttemptError{Attempt: t.attempt, Err: err}
			}
		}
	}
	body := &sessionlog.TurnBody{Outcome: out, InputCursor: d.cursor, Inputs: d.inputs, Agent: t.agent, Labels: labelsOf(t.in)}
	if f != nil {
		body = failedBody(f, st, t)
	}
	if f == nil {
		if err := s.armWaits(ctx, st.suspended, body.Outcome.Suspended); err != nil {
			return nil, err
		}
	}
	if err := s.boundary("before-commit"); err != nil {
		return nil, err
	}
	pos, err = s.commit(ctx, t.p, pos, id, body)
	if f == nil && errors.Is(err, blobs.ErrTooLarge) {
		f = &failure{code: FailTooLarge, err: err}
		body = failedBody(f, st, t)
		pos, err = s.commit(ctx, t.p, pos, id, body)
	}
	if err != nil {
		return nil, err
	}
	t.pos = pos
	if f != nil {
		d.executed, d.replayed = 0, 0
		n.opts.logger.Error("turn failed for good: committed as failed", "session", s.id, "turn", id, "code", f.code, "err", f.err)
		n.observe(Event{Kind: EventTurnAborted, Session: s.id, Turn: id, Code: f.code, Err: f.err})
	}
	n.observe(Event{Kind: EventTurnCommitted, Session: s.id, Turn: id, Took: time.Since(began)})
	n.opts.logger.Info("turn committed", "session", s.id, "turn", id, "executed", d.executed, "replayed", d.replayed,
		"took", time.Since(began).Round(time.Millisecond), "status", body.Outcome.Status.String(),
		"termination", body.Outcome.Termination.String(), "attempt", t.attempt)
	s.publishLive(id, live.Event{Type: live.TypeTurnCommitted, Status: body.Outcome.Status.String(),
		Termination: body.Outcome.Termination.Reason.String(), Code: body.Outcome.Termination.Code, Cursor: body.InputCursor})
	if err := s.boundary("after-commit"); err != nil {
		return nil, err
	}
	if body.Outcome.Termination.Reason == turn.Cancelled {
		n.stopSubAgents(ctx, s.id, id, body.Outcome.Messages)
	}
	st.committed(pos.Seq(), pos.Token(), t.p.fingerprint[:], body)
	s.snapshot(st)
	s.wakeAfterCommit(ctx, id, body.Outcome.Suspended)
	return &TurnResult{Turn: id, Seq: pos.Seq(), Cursor: body.InputCursor, Outcome: body.Outcome,
		Executed: d.executed, Replayed: d.replayed}, nil
}

// failedBody is the commit of a turn that failed: it consumes its own
// input only, and keeps the session's suspended calls.
func failedBody(f *failure, st *state, t *turnRun) *sessionlog.TurnBody {
	return &sessionlog.TurnBody{Outcome: failedOutcome(f, st.suspended), InputCursor: t.input.Seq,
		Inputs: []sessionlog.InputUse{t.use}, Agent: t.agent, Labels: labelsOf(t.in)}
}

// labelsOf are an input's labels as a commit keeps them, sorted.
func labelsOf(in Input) []sessionlog.Label {
	if len(in.Labels) == 0 {
		return nil
	}
	out := make([]sessionlog.Label, 0, len(in.Labels))
	for k, v := range in.Labels {
		out = append(out, sessionlog.Label{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b sessionlog.Label) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (s *Session) commit(ctx context.Context, p *profile, pos sessionlog.Position, id string, body *sessionlog.TurnBody) (sessionlog.Position, error) {
	n := s.n
	data, err := sessionlog.EncodeTurnBody(body)
	if err != nil {
		return pos, err
	}
	at, err := p.log.Commit(ctx, pos, id, data)
	if err != nil {
		var conflict *sessionlog.CommitConflictError
		if errors.As(err, &conflict) || errors.Is(err, sessionlog.ErrFenced) {
			n.observe(Event{Kind: EventCommitConflict, Session: s.id, Turn: id, Err: err})
		}
		return pos, err
	}
	return at, nil
}

// boundaries names a point around an effect twice: by kind ("after-record
// llm-call") and by kind and id ("after-record llm-call 5").
func (s *Session) boundaries(where string, e turn.Effect) error {
	if s.n.opts.boundary == nil {
		return nil // no names to build: most runs
	}
	name := where + " " + e.Kind().String()
	if err := s.boundary(name); err != nil {
		return err
	}
	return s.boundary(fmt.Sprintf("%s %d", name, e.Head().ID))
}

// boundaryCall is boundary at a point of one tool call, named only when a
// hook asks.
func (s *Session) boundaryCall(where, callID string) error {
	if s.n.opts.boundary == nil {
		return nil
	}
	return s.n.opts.boundary(where + " " + callID)
}

// boundary lets tests stop the driver at a named point, as a crash would.
func (s *Session) boundary(name string) error {
	if s.n.opts.boundary == nil {
		return nil
	}
	return s.n.opts.boundary(name)
}
