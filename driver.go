package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
)

// ErrLeaseLost: the node lost the session's lease while running a turn;
// nothing of the turn was committed by this node.
var ErrLeaseLost = errors.New("lash: session lease lost")

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
// lease meanwhile; a session run elsewhere is ErrBusy.
func (s *Session) Run(ctx context.Context) ([]TurnResult, error) {
	n := s.n
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.running[s.id] {
		n.mu.Unlock()
		return nil, fmt.Errorf("%w: %s runs on this node", ErrBusy, s.id)
	}
	n.running[s.id] = true
	n.runs.Add(1)
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.running, s.id)
		n.mu.Unlock()
		n.runs.Done()
	}()
	// A drain that runs out of time stops the turn like its caller would.
	ctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	defer context.AfterFunc(n.halt, cancelRun)()

	key, err := leases.Key("sess", s.id)
	if err != nil {
		return nil, err
	}
	lease, err := n.leases.Claim(ctx, key, n.opts.leaseTTL)
	if errors.Is(err, leases.ErrBusy) {
		n.observe(Event{Kind: EventLeaseBusy, Session: s.id})
		return nil, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	n.observe(Event{Kind: EventLeaseClaimed, Session: s.id})
	if err := s.boundary("lease"); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(lease.TTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := n.leases.Renew(ctx, lease); err != nil && ctx.Err() == nil {
					cancel(fmt.Errorf("%w: %v", ErrLeaseLost, err))
					return
				}
			}
		}
	}()
	defer func() {
		cancel(nil)
		<-renewed
	}()
	results, err := s.runTurns(ctx, lease)
	cancel(nil)
	<-renewed
	if rerr := n.leases.Release(context.WithoutCancel(ctx), lease); rerr != nil && !errors.Is(rerr, leases.ErrLost) {
		n.opts.logger.Warn("releasing a session lease", "session", s.id, "err", rerr)
	}
	if err == nil {
		err = s.boundary("after-release")
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && errors.Is(cause, ErrLeaseLost) {
		err = cause
		n.observe(Event{Kind: EventLeaseLost, Session: s.id, Err: err})
	}
	if err != nil {
		n.observe(Event{Kind: EventTurnFailed, Session: s.id, Err: err})
	}
	return results, err
}

func (s *Session) runTurns(ctx context.Context, lease *leases.Lease) ([]TurnResult, error) {
	n := s.n
	pos, err := n.log.Fence(ctx, s.id, lease.Token, n.runName)
	if err != nil {
		return nil, err
	}
	if err := s.boundary("fence"); err != nil {
		return nil, err
	}
	st, err := s.loadThrough(ctx, pos.Seq())
	if err != nil {
		return nil, err
	}
	var results []TurnResult
	for {
		var next *sessionlog.Input
		err := n.log.InputsAfter(ctx, s.id, st.cursor, func(in sessionlog.Input) error {
			next = &in
			return errStop
		})
		if err != nil && !errors.Is(err, errStop) {
			return results, err
		}
		if next == nil {
			return results, nil
		}
		// The turn's id comes from its input's identity: stable on every node.
		turnID := fmt.Sprintf("in-%d", next.Seq)
		began := time.Now()
		d := &drive{s: s, turn: turnID, cursor: next.Seq}
		out, err := d.run(ctx, st, next)
		if err != nil {
			return results, err
		}
		body, err := sessionlog.EncodeTurnBody(&sessionlog.TurnBody{Outcome: out, InputCursor: d.cursor})
		if err != nil {
			return results, err
		}
		if err := s.boundary("before-commit"); err != nil {
			return results, err
		}
		if pos, err = n.log.Commit(ctx, pos, turnID, body); err != nil {
			var conflict *sessionlog.CommitConflictError
			if errors.As(err, &conflict) || errors.Is(err, sessionlog.ErrFenced) {
				n.observe(Event{Kind: EventCommitConflict, Session: s.id, Turn: turnID, Err: err})
			}
			return results, err
		}
		n.observe(Event{Kind: EventTurnCommitted, Session: s.id, Turn: turnID, Took: time.Since(began)})
		if err := s.boundary("after-commit"); err != nil {
			return results, err
		}
		b, _ := sessionlog.DecodeTurnBody(body)
		st.apply(turnID, pos.Seq(), b)
		s.wakeAfterCommit(ctx, turnID, out.Suspended)
		results = append(results, TurnResult{Turn: turnID, Seq: pos.Seq(), Cursor: d.cursor, Outcome: out,
			Executed: d.executed, Replayed: d.replayed})
	}
}

// boundaries names a point around an effect twice: by kind ("after-record
// llm-call") and by kind and id ("after-record llm-call 5").
func (s *Session) boundaries(where string, e turn.Effect) error {
	name := where + " " + e.Kind().String()
	if err := s.boundary(name); err != nil {
		return err
	}
	return s.boundary(fmt.Sprintf("%s %d", name, e.Head().ID))
}

// boundary lets tests stop the driver at a named point, as a crash would.
func (s *Session) boundary(name string) error {
	if s.n.opts.boundary == nil {
		return nil
	}
	return s.n.opts.boundary(name)
}

// drive runs one turn: every effect is answered from the journal when it
// was recorded, and performed and recorded otherwise.
type drive struct {
	s        *Session
	turn     string
	cursor   uint64 // the last input this turn consumed
	executed int
	replayed int
	mu       sync.Mutex
	// recorded is the turn's journal as it stood when the turn started:
	// one read instead of a lookup per effect. Effects recorded since by
	// another node are found by Record, which returns the first record.
	recorded map[turn.ReplayKey]*effectlog.Record
}

// lookup returns the recorded outcome of the effect at key, checking that
// it was recorded for the same request.
func (d *drive) lookup(key turn.ReplayKey, hash turn.Hash) (*effectlog.Record, error) {
	rec, ok := d.recorded[key]
	if !ok {
		return nil, effectlog.ErrNotRecorded
	}
	if rec.Hash != hash {
		return nil, &effectlog.NondeterminismError{Key: key, Recorded: rec.Hash, Current: hash}
	}
	return rec, nil
}

func (d *drive) run(ctx context.Context, st *state, input *sessionlog.Input) (turn.Outcome, error) {
	n := d.s.n
	// A bad input is consumed by a turn that records why it was refused
	// and changes nothing else: the calls the session holds suspended stay
	// suspended.
	in, err := parseInput(input.Data)
	if err == nil && in.Text == "" && !in.Cancel {
		err = decisionsMatch(d.s.id, in.Decisions, st.suspended)
	}
	if err != nil {
		return invalidInput(err, st.suspended), nil
	}
	m, err := turn.New(n.opts.machine, turn.Start{Session: d.s.id, Turn: d.turn,
		History: st.history, Suspended: st.suspended, Input: in.toTurn()})
	if err != nil {
		return turn.Outcome{}, err
	}
	recs, err := n.journal.Load(ctx, d.s.id, d.turn)
	if err != nil {
		return turn.Outcome{}, err
	}
	d.recorded = make(map[turn.ReplayKey]*effectlog.Record, len(recs))
	for _, r := range recs {
		d.recorded[r.Key] = r
	}
	cancelNow := in.Cancel
	for {
		switch e := m.Next().(type) {
		case *turn.Progress:
			d.publish(LiveEvent{Type: "progress", Turn: d.turn, Messages: e.Messages, Events: e.Events})
		case *turn.Emit:
			d.publish(LiveEvent{Type: "emit", Turn: d.turn, Events: []turn.Event{e.Event}})
		case *turn.Done:
			return e.Outcome, nil
		case *turn.ToolCalls:
			results, err := d.toolCalls(ctx, e)
			if err != nil {
				return turn.Outcome{}, err
			}
			if err := m.Deliver(turn.ToolResults{ID: e.H.ID, Results: results}); err != nil {
				return turn.Outcome{}, err
			}
		default:
			if cancelNow {
				// The turn's own input is a cancel: answer its first
				// effect with it, journaled like any answer.
				cancelNow = false
				reason := "cancelled by input"
				e = cancelled{e, reason}
			}
			r, err := d.effect(ctx, e)
			if err != nil {
				return turn.Outcome{}, err
			}
			if err := m.Deliver(r); err != nil {
				return turn.Outcome{}, err
			}
		}
	}
}

// invalidInput is the outcome of a turn that consumed an input it refused.
func invalidInput(err error, suspended []turn.SuspendedCall) turn.Outcome {
	return turn.Outcome{Status: turn.StatusDone, Suspended: suspended,
		Termination: turn.Termination{Reason: turn.Error, Code: "invalid_input", Detail: err.Error()}}
}

// decisionsMatch refuses an input of decisions only, none of which names a
// call the session holds suspended: it would start a turn with nothing to do.
func decisionsMatch(session string, ds []Decision, suspended []turn.SuspendedCall) error {
	var calls []string
	for _, d := range ds {
		for _, c := range suspended {
			if c.Call.ID == d.CallID {
				return nil
			}
		}
		calls = append(calls, d.CallID)
	}
	return fmt.Errorf("%w: session %s holds none of the calls %q suspended (decided already, or never suspended)", ErrBadInput, session, calls)
}

// cancelled marks an effect to be answered with Cancel.
type cancelled struct {
	turn.Effect
	reason string
}

// effect answers one effect from the journal or by performing it.
func (d *drive) effect(ctx context.Context, e turn.Effect) (turn.Result, error) {
	n := d.s.n
	h := e.Head()
	rec, err := d.lookup(h.Key, h.Hash)
	if err == nil {
		a, err := decodeAnswer(rec.Outcome.Data)
		if err != nil {
			return nil, err
		}
		d.cursor = max(d.cursor, a.Cursor)
		d.replayed++
		n.observe(Event{Kind: EventEffectReplayed, Session: d.s.id, Turn: d.turn, Effect: e.Kind().String()})
		return a.result(e.Kind(), h.ID)
	}
	if !errors.Is(err, effectlog.ErrNotRecorded) {
		return nil, err // nondeterminism among them: the turn stops here
	}
	if err := d.s.boundaries("before-record", e); err != nil {
		return nil, err
	}
	var a *answer
	began := time.Now()
	if c, ok := e.(cancelled); ok {
		a = &answer{Cancel: &c.reason}
	} else if a, err = d.perform(ctx, e); err != nil {
		return nil, err
	}
	a.Took = time.Since(began)
	a.Request = renderRequest(e)
	data, err := encodeAnswer(a)
	if err != nil {
		return nil, err
	}
	rec, _, err = n.journal.Record(ctx, h.Key, h.Hash, effectlog.Outcome{Data: data})
	if err != nil {
		return nil, err
	}
	if a, err = decodeAnswer(rec.Outcome.Data); err != nil { // the winner's answer
		return nil, err
	}
	if err := d.s.boundaries("after-record", e); err != nil {
		return nil, err
	}
	d.cursor = max(d.cursor, a.Cursor)
	d.executed++
	n.observe(Event{Kind: EventEffectExecuted, Session: d.s.id, Turn: d.turn, Effect: e.Kind().String(), Took: a.Took})
	return a.result(e.Kind(), h.ID)
}

// perform does what an unrecorded effect asks.
func (d *drive) perform(ctx context.Context, e turn.Effect) (*answer, error) {
	n := d.s.n
	switch e := e.(type) {
	case *turn.SyncTools:
		return &answer{Tools: n.opts.tools.Specs()}, nil
	case *turn.LLMCall:
		resp, err := n.opts.model.Complete(ctx, e.Request, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx) // not the model's answer: record nothing
			}
			return &answer{CallErr: callError(err)}, nil
		}
		return &answer{Response: &resp}, nil
	case *turn.Checkpoint:
		return d.arrived(ctx)
	case *turn.Sleep:
		t := time.NewTimer(e.Duration)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-t.C:
			return &answer{}, nil
		}
	case *turn.AwaitEvent:
		deadline := time.Now().Add(e.Timeout)
		for {
			a, err := d.arrived(ctx)
			if err != nil || len(a.Messages) > 0 || len(a.Decisions) > 0 {
				return a, err
			}
			if !time.Now().Before(deadline) {
				a.TimedOut = true
				return a, nil
			}
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(min(250*time.Millisecond, time.Until(deadline))):
			}
		}
	}
	return nil, fmt.Errorf("lash: cannot perform %s", e.Kind())
}

// arrived takes the inputs that came after the turn's cursor: their
// messages and decisions are injected at the checkpoint, and the answer
// records how far they go.
func (d *drive) arrived(ctx context.Context) (*answer, error) {
	n := d.s.n
	a := &answer{Cursor: d.cursor}
	err := n.log.InputsAfter(ctx, d.s.id, d.cursor, func(in sessionlog.Input) error {
		a.Cursor = in.Seq
		parsed, err := parseInput(in.Data)
		if err != nil {
			n.opts.logger.Warn("input passed over: it cannot be read", "session", d.s.id, "seq", in.Seq, "err", err)
			a.Refused = append(a.Refused, fmt.Sprintf("input %d: %v", in.Seq, err))
			return nil
		}
		t := parsed.toTurn()
		a.Messages = append(a.Messages, t.Messages...)
		a.Decisions = append(a.Decisions, t.Decisions...)
		if parsed.Cancel && a.Cancel == nil {
			reason := fmt.Sprintf("cancelled by input %d", in.Seq)
			a.Cancel = &reason
		}
		return nil
	})
	return a, err
}

// LiveEvent is what a turn publishes, as JSON, on the session's live
// subject (p.live.<session>) for UIs: ephemeral, never journaled.
type LiveEvent struct {
	Type     string         `json:"type"`
	Turn     string         `json:"turn"`
	Messages []turn.Message `json:"messages,omitempty"`
	Events   []turn.Event   `json:"events,omitempty"`
}

func (d *drive) publish(ev LiveEvent) {
	subj, err := d.s.n.client.Subjects().Live(d.s.id)
	if err != nil {
		return
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	// Best effort: live events are hints for watchers, not state.
	_ = d.s.n.nc.Publish(subj, data)
}

// toolCalls answers a batch: calls recorded in the journal are not run
// again; the others run in parallel and each outcome is recorded as it
// comes.
func (d *drive) toolCalls(ctx context.Context, batch *turn.ToolCalls) ([]turn.ToolResult, error) {
	results := make([]turn.ToolResult, len(batch.Calls))
	errs := make([]error, len(batch.Calls))
	var wg sync.WaitGroup
	for i, pc := range batch.Calls {
		rec, err := d.lookup(pc.Key, pc.Hash)
		if err == nil {
			a, err := decodeAnswer(rec.Outcome.Data)
			if err != nil || a.Result == nil {
				return nil, fmt.Errorf("lash: journal record for %s holds no tool result: %v", pc.Key, err)
			}
			results[i] = *a.Result
			d.replayed++
			d.s.n.observe(Event{Kind: EventEffectReplayed, Session: d.s.id, Turn: d.turn, Effect: batch.Kind().String()})
			continue
		}
		if !errors.Is(err, effectlog.ErrNotRecorded) {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = d.toolCall(ctx, pc)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

func (d *drive) toolCall(ctx context.Context, pc turn.PendingCall) (turn.ToolResult, error) {
	n := d.s.n
	inDoubt, err := n.journal.InDoubt(ctx, pc.Key)
	if err != nil {
		return turn.ToolResult{}, err
	}
	attempt := 1
	if inDoubt {
		attempt = 2
	}
	if err := n.journal.Started(ctx, pc.Key, attempt); err != nil {
		return turn.ToolResult{}, err
	}
	if err := d.s.boundary("before-record tool " + pc.Call.ID); err != nil {
		return turn.ToolResult{}, err
	}
	began := time.Now()
	res, err := n.runner.Invoke(ctx, pc, attempt, inDoubt)
	if err != nil {
		return turn.ToolResult{}, err // interrupted: record nothing
	}
	took := time.Since(began)
	data, err := encodeAnswer(&answer{Result: &res, Took: took, Request: renderCall(pc)})
	if err != nil {
		return turn.ToolResult{}, err
	}
	rec, _, err := n.journal.Record(ctx, pc.Key, pc.Hash, effectlog.Outcome{Data: data})
	if err != nil {
		return turn.ToolResult{}, err
	}
	a, err := decodeAnswer(rec.Outcome.Data)
	if err != nil || a.Result == nil {
		return turn.ToolResult{}, fmt.Errorf("lash: journal record for %s holds no tool result: %v", pc.Key, err)
	}
	if err := d.s.boundary("after-record tool " + pc.Call.ID); err != nil {
		return turn.ToolResult{}, err
	}
	d.mu.Lock()
	d.executed++
	d.mu.Unlock()
	n.observe(Event{Kind: EventEffectExecuted, Session: d.s.id, Turn: d.turn, Effect: turn.KindToolCalls.String(), Took: took})
	return *a.Result, nil
}
