package lash

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"go.opentelemetry.io/otel/codes"
)

// drive runs one turn: every effect is answered from the journal when it
// was recorded, and performed and recorded otherwise.
type drive struct {
	s *Session
	p *profile
	// agent is the session's agent binding the turn runs under.
	agent    string
	turn     string
	executed int
	replayed int
	// recorded is the turn's journal as it stood when the turn started:
	// one read instead of a lookup per effect. Effects recorded since by
	// another node are found by Record, which returns the first record.
	recorded map[turn.ReplayKey]*effectlog.Record
	// fresh: no other run recorded anything for this turn when it began,
	// so its journal and intents need no read.
	fresh bool
	// intends is the model call whose record Intends the tool batch that
	// follows it (effectlog.Outcome.Intends); ownIntent says the record
	// that stands is this run's.
	intends   turn.EffectID
	ownIntent bool
	// next is what the record of the last effect answered for the
	// checkpoint after it (answer.Next), that checkpoint's id and place,
	// and whether this run wrote the record.
	next    *answer
	nextID  turn.EffectID
	nextAt  turn.CheckpointKind
	nextOwn bool

	mu sync.Mutex
	// cursor is the last input this turn consumed; inputs are those it
	// consumed, with their keys, for the commit.
	cursor uint64
	inputs []sessionlog.InputUse
	// interrupt cancels the effect in flight when a cancel input is stored.
	interrupt *interrupt
	// state is the session as the turn began.
	state *state
	// attrMu guards state.runs, which attributed reads and extends from
	// the goroutines of a round's calls.
	attrMu sync.Mutex
	// live is the session's live subject, named as the run starts (a
	// streamed answer's events come from a timer's goroutine).
	live string
	// render renders the requests the run records.
	render renderer
	// tools is the catalog the turn synced; prog, the program running
	// between its effects.
	tools []turn.ToolSpec
	prog  *progRun
	// childRan: this run made a program's call.
	childRan bool
}

func (d *drive) st() *state { return d.state }

// lookup returns the recorded outcome of the effect at key, checking that
// it was recorded for the same request.
func (d *drive) lookup(key turn.ReplayKey, hash turn.Hash) (*effectlog.Record, error) {
	rec, ok := d.recorded[key]
	if !ok || !replayGuard {
		return nil, effectlog.ErrNotRecorded
	}
	if rec.Hash != hash {
		return nil, &effectlog.NondeterminismError{Key: key, Recorded: rec.Hash, Current: hash}
	}
	return rec, nil
}

// run drives the turn of input in. recs is the turn's journal when the
// caller read it already.
func (d *drive) run(ctx context.Context, st *state, in Input, recs []*effectlog.Record) (turn.Outcome, error) {
	n := d.s.n
	frame := st.framed()
	m, err := turn.New(d.p.config, turn.Start{Session: d.s.id, Turn: d.turn,
		History: frame[1:], Frame: frame, HistoryDigest: &st.digest, Suspended: st.suspended, Input: in.toTurn()})
	if err != nil {
		return turn.Outcome{}, terminal(FailInvalidResult, err)
	}
	if recs == nil && !d.fresh {
		if recs, err = n.journal.Load(ctx, d.s.id, d.turn); err != nil {
			return turn.Outcome{}, err
		}
	}
	d.state = st
	d.live, _ = n.client.Subjects().Live(d.s.id) // the session's id is checked: no error
	d.recorded = make(map[turn.ReplayKey]*effectlog.Record, len(recs))
	for _, r := range recs {
		if err := d.attributed(ctx, r); err != nil {
			return turn.Outcome{}, err
		}
		d.recorded[r.Key] = r
	}
	d.interrupt = d.watch(st)
	defer d.interrupt.stop()
	defer d.stopProgram()
	cancelNow := in.Cancel
	for {
		switch e := m.Next().(type) {
		case *turn.Progress:
			for _, ev := range live.Progress(e) {
				d.publish(ev)
			}
		case *turn.Emit:
			d.publish(live.Notice(e.Event))
		case *turn.Done:
			return e.Outcome, nil
		case *turn.ExecCode:
			r, err := d.exec(ctx, e)
			if err != nil {
				return turn.Outcome{}, err
			}
			if err := m.Deliver(r); err != nil {
				return turn.Outcome{}, terminal(FailInvalidResult, err)
			}
		case *turn.ProgramCalls:
			outs, cancel, err := d.programCalls(ctx, e)
			if err != nil {
				return turn.Outcome{}, err
			}
			var r turn.Result = turn.ProgramResults{ID: e.H.ID, Outcomes: outs}
			if cancel != nil {
				r = turn.Cancel{ID: e.H.ID, Reason: *cancel}
			}
			if err := m.Deliver(r); err != nil {
				return turn.Outcome{}, terminal(FailInvalidResult, err)
			}
		case *turn.ToolCalls:
			d.stopProgram()
			results, cancel, err := d.toolCalls(ctx, e)
			if err != nil {
				return turn.Outcome{}, err
			}
			if len(results) > 0 {
				if err := m.Deliver(turn.ToolResults{ID: e.H.ID, Results: results}); err != nil {
					return turn.Outcome{}, terminal(FailInvalidResult, err)
				}
			}
			if cancel != nil {
				if err := m.Deliver(turn.Cancel{ID: e.H.ID, Reason: *cancel}); err != nil {
					return turn.Outcome{}, terminal(FailInvalidResult, err)
				}
			}
		default:
			if cancelNow {
				// The turn's own input is a cancel: answer its first
				// effect with it, journaled like any answer.
				cancelNow = false
				e = cancelled{e, "cancelled by input"}
			}
			d.stopProgram()
			ectx, span := d.effectSpan(ctx, e.Kind(), e.Head().ID)
			replayed := d.replayed
			r, err := d.effect(ectx, e)
			if synced, ok := r.(turn.ToolsSynced); ok {
				d.tools = synced.Tools
			}
			span.SetAttributes(attrReplayed.Bool(d.replayed > replayed))
			endSpan(span, err)
			if err != nil {
				return turn.Outcome{}, err
			}
			if err := m.Deliver(r); err != nil {
				return turn.Outcome{}, terminal(FailInvalidResult, err)
			}
		}
	}
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
	next, own := d.next, d.nextOwn
	d.next = nil
	if _, ok := e.(*turn.Checkpoint); ok && next != nil && h.ID == d.nextID {
		if want := turn.CheckpointHash(d.nextAt); h.Hash != want {
			return nil, &effectlog.NondeterminismError{Key: h.Key, Recorded: want, Current: h.Hash}
		}
		d.took(next)
		ev := Event{Kind: EventEffectReplayed, Session: d.s.id, Turn: d.turn, Effect: e.Kind().String()}
		if own {
			d.executed++
			ev.Kind, ev.Took = EventEffectExecuted, next.Took
			for _, r := range next.Refused { // read ahead, told now that it stands
				n.opts.logger.Warn("input refused at a checkpoint", "session", d.s.id, "input", r)
			}
		} else {
			d.replayed++
		}
		n.observe(ev)
		return next.result(e.Kind(), h.ID)
	}
	rec, err := d.lookup(h.Key, h.Hash)
	if err == nil {
		a, err := decodeAnswer(rec.Outcome.Data)
		if err != nil {
			return nil, err
		}
		d.took(a)
		d.replayed++
		d.intended(h.ID, rec, false)
		d.next, d.nextID, d.nextAt, d.nextOwn = a.Next, h.ID+1, turn.BeforeFinish, false
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
	a.Request = d.render.request(e)
	if answersNext(a) {
		a.Next = d.peek(ctx, false)
	}
	max := n.client.Config().MaxPayloadBytes
	data, err := encodeRecord(a, max)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max && a.Response != nil {
		// A model answer over the ceiling is the model's failure, recorded
		// once: calling again would pay for the same answer.
		a = &answer{CallErr: &turn.CallError{Code: codeAnswerTooLarge,
			Message: fmt.Sprintf("the model's answer takes %d bytes, more than the %d bytes lash keeps", len(data), max)},
			Took: a.Took, Request: a.Request}
		if data, err = encodeAnswer(a); err != nil {
			return nil, err
		}
	}
	// The tool calls a model answer asks for count as started once it is
	// stored: their batch then needs no intents of its own (one write per
	// call less), at the price of calling them in doubt should a run stop
	// between this record and their start.
	intends := a.Response != nil && len(a.Response.ToolCalls) > 0
	rec, won, err := d.p.journal.Record(ctx, h.Key, h.Hash, effectlog.Outcome{Data: data, Intends: intends})
	if err != nil {
		return nil, err
	}
	if !won {
		if err := d.attributed(ctx, rec); err != nil {
			return nil, err
		}
	}
	if won && a.plain() {
		a.asNil() // as the record reads back, for any run that replays it
	} else if a, err = decodeAnswer(rec.Outcome.Data); err != nil { // the winner's answer
		return nil, err
	}
	d.intended(h.ID, rec, won)
	d.next, d.nextID, d.nextAt, d.nextOwn = a.Next, h.ID+1, turn.BeforeFinish, won
	if err := d.s.boundaries("after-record", e); err != nil {
		return nil, err
	}
	d.took(a)
	d.executed++
	n.observe(Event{Kind: EventEffectExecuted, Session: d.s.id, Turn: d.turn, Effect: e.Kind().String(), Took: a.Took})
	return a.result(e.Kind(), h.ID)
}

// intended notes the record of effect id, replayed or just written (own:
// by this run), for the tool batch that may follow it.
func (d *drive) intended(id turn.EffectID, rec *effectlog.Record, own bool) {
	d.intends, d.ownIntent = 0, false
	if rec.Outcome.Intends {
		d.intends, d.ownIntent = id, own
	}
}

// peek reads what the checkpoint after the effect being answered would
// find, for that effect's record to carry. Without it (the read failed)
// the checkpoint reads and records on its own. Between tool rounds it does
// not read when nothing was published on the session's input subjects
// since its last read began (the hints of interrupt): the read would find
// nothing new. A hint that comes late defers its input to a later
// checkpoint: the one after the model's final answer always reads, and the
// read after the commit finds what is left (ADR 0017).
func (d *drive) peek(ctx context.Context, betweenRounds bool) *answer {
	if betweenRounds && !d.interrupt.arrivalsSince() {
		d.mu.Lock()
		defer d.mu.Unlock()
		return &answer{Cursor: d.cursor}
	}
	seen := d.interrupt.arrivals.Load()
	began := time.Now()
	a, err := d.arrived(ctx, false)
	if err != nil {
		return nil
	}
	d.interrupt.read.Store(seen)
	a.Took = time.Since(began)
	return a
}

// encodeRecord encodes a for its record, without the next checkpoint's
// answer when both would not fit in max bytes: the checkpoint then reads
// and records on its own.
func encodeRecord(a *answer, max int64) ([]byte, error) {
	data, err := encodeAnswer(a)
	if err != nil || int64(len(data)) <= max || a.Next == nil {
		return data, err
	}
	a.Next = nil
	return encodeAnswer(a)
}

// codeAnswerTooLarge is the call error recorded for a model answer above
// the deployment's payload ceiling.
const codeAnswerTooLarge = "answer_too_large"

// took notes the inputs a recorded answer consumed.
func (d *drive) took(a *answer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cursor = max(d.cursor, a.Cursor)
	d.inputs = append(d.inputs, a.Inputs...)
}

// perform does what an unrecorded effect asks.
func (d *drive) perform(ctx context.Context, e turn.Effect) (*answer, error) {
	n := d.s.n
	switch e := e.(type) {
	case *turn.SyncTools:
		specs, err := n.toolSpecs(ctx, d.s.id)
		if err != nil {
			return nil, err
		}
		return &answer{Tools: offerPrograms(d.p.config.Mode, d.p.offer(specs))}, nil
	case *turn.LLMCall:
		ectx, done := d.interrupt.begin(ctx)
		// Streamed: watchers see the answer as it comes. Only an executed
		// call streams; a replayed one is answered from the journal.
		var onDelta func(string)
		if !n.opts.noStreaming {
			deltas := newDeltas(d, uint64(e.H.ID))
			defer deltas.flush()
			onDelta = deltas.add
		}
		resp, err := d.p.model.Complete(ectx, e.Request, onDelta)
		stop := done()
		if stop != nil {
			return stop, nil // cancelled by an input: the partial answer is dropped
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx) // not the model's answer: record nothing
			}
			ce := callError(err)
			n.opts.logger.Warn("model call failed", "session", d.s.id, "turn", d.turn, "code", ce.Code, "retryable", ce.Retryable,
				"err", ce.Message)
			n.observe(Event{Kind: EventModelCall, Session: d.s.id, Turn: d.turn, Model: e.Request.Model, Code: ce.Code})
			return &answer{CallErr: ce}, nil
		}
		n.observe(Event{Kind: EventModelCall, Session: d.s.id, Turn: d.turn, Model: e.Request.Model, Usage: resp.Usage})
		return &answer{Response: &resp}, nil
	case *turn.Checkpoint:
		return d.arrived(ctx, true)
	case *turn.Sleep:
		ectx, done := d.interrupt.begin(ctx)
		t := time.NewTimer(e.Duration)
		defer t.Stop()
		select {
		case <-ectx.Done():
		case <-t.C:
		}
		if stop := done(); stop != nil {
			return stop, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return &answer{}, nil
	case *turn.AwaitEvent:
		deadline := time.Now().Add(e.Timeout)
		for {
			a, err := d.arrived(ctx, true)
			if err != nil || len(a.Messages) > 0 || len(a.Decisions) > 0 || a.Cancel != nil {
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

// arrived takes the inputs that came after the turn's cursor, up to and
// including the first cancel: their messages and decisions are injected at
// the checkpoint, and the answer records how far they go. Inputs after a
// cancel are left for the next turn. warn logs the inputs it refuses; a
// read ahead for a record leaves that to the checkpoint that takes it.
func (d *drive) arrived(ctx context.Context, warn bool) (*answer, error) {
	n := d.s.n
	d.mu.Lock()
	a := &answer{Cursor: d.cursor}
	taken := d.inputs
	d.mu.Unlock()
	err := n.log.InputsAfter(ctx, d.s.id, a.Cursor, func(in sessionlog.Input) error {
		a.Cursor = in.Seq
		use, parsed, take := screen(d.st(), slices.Concat(taken, a.Inputs), in, false, d.s.n.vouched)
		a.Inputs = append(a.Inputs, use)
		if !take {
			if use.Refused != "" {
				if warn {
					n.opts.logger.Warn("input refused at a checkpoint", "session", d.s.id, "seq", in.Seq, "reason", use.Refused)
				}
				a.Refused = append(a.Refused, fmt.Sprintf("input %d: %s", in.Seq, use.Refused))
			}
			return nil
		}
		t := parsed.toTurn()
		a.Messages = append(a.Messages, t.Messages...)
		a.Decisions = append(a.Decisions, t.Decisions...)
		if parsed.Cancel {
			reason := fmt.Sprintf("cancelled by input %d", in.Seq)
			a.Cancel = &reason
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return a, err
}

// publish publishes a live event of the turn, on the subject named once a
// run: a turn publishes several a round.
func (d *drive) publish(ev live.Event) {
	if d.live != "" {
		d.s.publishLiveOn(d.live, d.turn, ev)
	}
}

// publishLive publishes ev on the session's live subject (package live),
// where the LIVE stream keeps it for watchers. Without waiting for the
// stream: live events are for watchers, never journaled, and a lost one
// loses no truth.
func (s *Session) publishLive(turnID string, ev live.Event) {
	subj, err := s.n.client.Subjects().Live(s.id)
	if err != nil {
		return
	}
	s.publishLiveOn(subj, turnID, ev)
}

func (s *Session) publishLiveOn(subj, turnID string, ev live.Event) {
	ev.V, ev.Session, ev.Turn, ev.Node, ev.At = live.Version, s.id, turnID, s.n.runName, time.Now().UTC()
	data, err := ev.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		return
	}
	_ = s.n.nc.Publish(subj, data)
}

// toolCalls answers a batch: calls recorded in the journal are not run
// again; the others run in parallel and each outcome is recorded as it
// comes. A cancel input stored meanwhile stops the calls still running
// (their tools see their context end) and is recorded for the batch:
// cancel is then its reason, and the calls without a result are left out.
func (d *drive) toolCalls(ctx context.Context, batch *turn.ToolCalls) ([]turn.ToolResult, *string, error) {
	n := d.s.n
	d.next = nil
	// answers[i] is the record that stands for call i: its result, or the
	// cancel that a run stopped by a cancel input claimed in its place.
	// Each call's key is the only claim for it, so every run reads the
	// same round: cancelled when a call's record is a cancel.
	answers := make([]*answer, len(batch.Calls))
	owns := make([]bool, len(batch.Calls))
	for i, pc := range batch.Calls {
		rec, err := d.lookup(pc.Key, pc.Hash)
		if errors.Is(err, effectlog.ErrNotRecorded) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if answers[i], err = callAnswer(rec, pc.Key); err != nil {
			return nil, nil, err
		}
		_, span := d.effectSpan(ctx, turn.KindToolCall, batch.H.ID)
		span.SetAttributes(attrCall.String(pc.Call.ID), attrTool.String(pc.Call.Name), attrReplayed.Bool(true))
		span.End()
		d.replayed++
		n.observe(Event{Kind: EventEffectReplayed, Session: d.s.id, Turn: d.turn, Effect: batch.Kind().String()})
	}
	if first := slices.IndexFunc(answers, isCancel); first >= 0 {
		// A run stopped this round and died before it claimed every call
		// it stopped: claim the rest alike, so that no run can record a
		// result for one after the round was read as cancelled.
		if err := d.claimCancels(ctx, batch, answers, owns, answers[first]); err != nil {
			return nil, nil, err
		}
	} else if err := d.runCalls(ctx, batch, answers, owns); err != nil {
		return nil, nil, err
	}
	var results []turn.ToolResult
	var cancel *answer
	for i, a := range answers {
		switch {
		case a == nil:
			return nil, nil, fmt.Errorf("lash: tool call %s has no result", batch.Calls[i].Key)
		case a.Cancel != nil && cancel == nil:
			cancel = a
		case a.Result != nil:
			results = append(results, *a.Result)
		}
	}
	if cancel != nil {
		d.took(cancel)
		return results, cancel.Cancel, nil
	}
	if len(answers) == 1 {
		// A round of one call records the checkpoint after it in the
		// call's record; with more, one call would wait for the others.
		d.next, d.nextID, d.nextAt, d.nextOwn = answers[0].Next, batch.H.ID+1, turn.AfterTools, owns[0]
	}
	return results, nil, nil
}

// runCalls runs the calls of a round that have no record yet, at once, and
// fills in the answers that stand for them. A call a cancel input stopped
// gets a cancel claimed on its key; when every call has its result, a
// cancel that came meanwhile is left to the checkpoint after the round.
func (d *drive) runCalls(ctx context.Context, batch *turn.ToolCalls, answers []*answer, owns []bool) error {
	ectx, done := d.interrupt.begin(ctx)
	cause := causeNone
	if d.intends != 0 && batch.H.ID == d.intends+1 {
		cause = causeReplayed
		if d.ownIntent {
			cause = causeOwn
		}
	}
	carry := len(batch.Calls) == 1
	errs := make([]error, len(batch.Calls))
	if carry && answers[0] == nil {
		// One call: on this goroutine, which would only wait for it.
		answers[0], owns[0], errs[0] = d.toolCall(ctx, ectx, batch.Calls[0], cause, carry)
	} else {
		var wg sync.WaitGroup
		for i, pc := range batch.Calls {
			if answers[i] != nil {
				continue
			}
			wg.Go(func() { answers[i], owns[i], errs[i] = d.toolCall(ctx, ectx, pc, cause, carry) })
		}
		wg.Wait()
	}
	if stop := done(); stop != nil {
		return d.claimCancels(ctx, batch, answers, owns, stop)
	}
	for i := range answers {
		if answers[i] != nil {
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// claimCancels claims, with cancel, each call of the round that has no
// record yet, first writer wins, and takes the answers that stand.
func (d *drive) claimCancels(ctx context.Context, batch *turn.ToolCalls, answers []*answer, owns []bool, cancel *answer) error {
	for i, pc := range batch.Calls {
		if answers[i] != nil {
			continue
		}
		a := *cancel
		a.Next, a.Request = nil, "cancelled before its result\n"
		var err error
		if answers[i], owns[i], err = d.recordCall(ctx, pc, &a); err != nil {
			return err
		}
		if err := d.s.boundaryCall("after-record cancel", pc.Call.ID); err != nil {
			return err
		}
	}
	return nil
}

// isCancel says whether a call's record is a cancel claimed in place of
// its result.
func isCancel(a *answer) bool { return a != nil && a.Cancel != nil }

// callAnswer decodes a tool call's record: its result or a cancel.
func callAnswer(rec *effectlog.Record, key turn.ReplayKey) (*answer, error) {
	a, err := decodeAnswer(rec.Outcome.Data)
	if err == nil && a.Result == nil && a.Cancel == nil {
		err = fmt.Errorf("lash: journal record for %s holds no tool result", key)
	}
	if err != nil {
		return nil, terminal(FailUnreadableJournal, err)
	}
	return a, nil
}

// recordCall records a for call pc, first writer wins, and returns the
// answer that stands and whether it is a's.
func (d *drive) recordCall(ctx context.Context, pc turn.PendingCall, a *answer) (*answer, bool, error) {
	rec, won, err := d.recordAt(ctx, pc.Key, pc.Hash, a)
	if err != nil {
		return nil, false, err
	}
	if won && a.plain() {
		a.asNil()
		return a, true, nil
	}
	a, err = callAnswer(rec, pc.Key)
	return a, won, err
}

// recordAt records a at key, first writer wins, and returns the record
// that stands, and whether it is a's; another writer's is checked to be a
// run of this turn's.
func (d *drive) recordAt(ctx context.Context, key turn.ReplayKey, hash turn.Hash, a *answer) (*effectlog.Record, bool, error) {
	data, err := encodeRecord(a, d.s.n.client.Config().MaxPayloadBytes)
	if err != nil {
		return nil, false, err
	}
	rec, won, err := d.p.journal.Record(ctx, key, hash, effectlog.Outcome{Data: data})
	if err != nil {
		return nil, false, err
	}
	if !won {
		if err := d.attributed(ctx, rec); err != nil {
			return nil, false, err
		}
	}
	return rec, won, nil
}

// intentCause says what tells a re-executor that a tool call may have
// run: an intent of its own, or the model answer's record right before
// its batch (written by this run, or by an earlier one).
type intentCause int

const (
	causeNone intentCause = iota
	causeOwn
	causeReplayed
)

// toolCall runs one call under ectx, which a cancel input interrupts, and
// records its result under ctx, with what the checkpoint after the round
// finds when carry is set: a call that returned is recorded even when a
// cancel comes meanwhile, so the round's cancel record and its replay
// agree on the results. It returns the answer that stands, and whether
// this run wrote it.
func (d *drive) toolCall(ctx, ectx context.Context, pc turn.PendingCall, cause intentCause, carry bool) (*answer, bool, error) {
	n := d.s.n
	inDoubt := false
	switch {
	case cause == causeReplayed:
		// The run that recorded the answer may have started the call.
		inDoubt = true
	case cause == causeNone && !d.fresh:
		// Another run may have started the call and died before its record.
		var err error
		if inDoubt, err = n.journal.InDoubt(ctx, pc.Key); err != nil {
			return nil, false, err
		}
	}
	attempt := 1
	if inDoubt {
		attempt = 2
	}
	if cause == causeNone {
		if err := d.p.journal.Started(ctx, pc.Key, attempt); err != nil {
			return nil, false, err
		}
	}
	if err := d.s.boundaryCall("before-record tool", pc.Call.ID); err != nil {
		return nil, false, err
	}
	began := time.Now()
	sctx, span := d.effectSpan(ectx, turn.KindToolCall, pc.Key.Effect)
	span.SetAttributes(attrCall.String(pc.Call.ID), attrTool.String(pc.Call.Name), attrReplayed.Bool(false),
		attrAttempt.Int(attempt), attrInDoubt.Bool(inDoubt))
	tctx := n.toolContext(sctx)
	if d.p.allow != nil {
		tctx = tools.WithOffered(tctx, d.p.Tools)
		tctx = tools.WithAgentPolicy(tctx, tools.AgentPolicy{Agent: d.agent, SubAgents: d.p.SubAgents, MaxDepth: d.p.SubAgentDepth})
	}
	res, stopped, err := d.beforeTool(tctx, pc)
	if err == nil && !stopped {
		if res, err = n.runner.Invoke(tctx, pc, attempt, inDoubt); err == nil {
			// The call ran: a cancel now must not lose its result, so the
			// hook is asked under the run's context, not the call's.
			res, err = d.afterTool(ctx, pc, res)
		}
	}
	if err == nil && res.Status == turn.ToolError {
		span.SetStatus(codes.Error, "the tool failed")
	}
	endSpan(span, err)
	if err != nil {
		return nil, false, err // interrupted: record nothing
	}
	took := time.Since(began)
	if max := n.client.Config().MaxPayloadBytes; int64(len(res.Output)) > max-4<<10 {
		// Over the ceiling: the model learns so, and the call is not run
		// again, whatever its size next time.
		res = turn.ToolResult{CallID: pc.Call.ID, Status: turn.ToolError,
			Output: fmt.Sprintf("the tool's result takes %d bytes, more than the %d bytes lash keeps", len(res.Output), max-4<<10)}
	}
	n.observe(Event{Kind: EventToolCall, Session: d.s.id, Turn: d.turn, Tool: pc.Call.Name, Took: took, Code: res.Status.String()})
	if res.Status == turn.ToolError {
		// The model sees the error; operators see it here. Only the
		// first line, clipped: a tool's output is not a log line.
		first, _, _ := strings.Cut(res.Output, "\n")
		n.opts.logger.Info("tool call failed", "session", d.s.id, "turn", d.turn, "tool", pc.Call.Name, "call", pc.Call.ID,
			"took", took.Round(time.Millisecond), "err", first[:min(len(first), 200)])
	}
	a := &answer{Result: &res, Took: took, Request: renderCall(pc)}
	if carry {
		a.Next = d.peek(ctx, true)
	}
	a, won, err := d.recordCall(ctx, pc, a)
	if err != nil {
		return nil, false, err
	}
	if err := d.s.boundaryCall("after-record tool", pc.Call.ID); err != nil {
		return nil, false, err
	}
	d.mu.Lock()
	d.executed++
	d.mu.Unlock()
	n.observe(Event{Kind: EventEffectExecuted, Session: d.s.id, Turn: d.turn, Effect: turn.KindToolCalls.String(), Took: took})
	return a, won, nil
}

// attributed checks that a record another writer stored was written by a
// run of this turn: one that fenced the session since its last commit,
// with a token a lease could have had (ADR 0027). A run that fenced after this one read the log (a takeover)
// is found by reading the log again; a record no run of the turn wrote is
// set aside by failing the turn, never replayed as its outcome.
func (d *drive) attributed(ctx context.Context, rec *effectlog.Record) error {
	// A round's calls lose their records to another run at once, each on
	// a goroutine of its own: st.runs is theirs to share.
	d.attrMu.Lock()
	defer d.attrMu.Unlock()
	n, st := d.s.n, d.state
	if rec.Recorder == n.runName || rec.Recorder != "" && slices.Contains(st.runs, rec.Recorder) {
		return nil
	}
	found := false
	_, _, err := n.log.ReadEntries(ctx, d.s.id, st.settled+1, func(_ uint64, e *sessionlog.Entry) error {
		if e.Kind != sessionlog.KindFence || e.Owner != rec.Recorder || rec.Recorder == "" {
			return nil
		}
		// A fence the fold passes over vouches for no one.
		if ok, err := n.plausibleToken(ctx, e.Token); err != nil || !ok {
			return err
		}
		found = true
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	if found {
		st.runs = append(st.runs, rec.Recorder)
		return nil
	}
	return terminal(FailUnreadableJournal, fmt.Errorf("journal record %s was written by %q, which never fenced this turn: set aside, not replayed", rec.Key, rec.Recorder))
}

// deltas gathers the pieces of a streamed answer into text_delta events:
// a piece after a quiet spell goes out at once, pieces that come faster
// go out together at most deltaEvery apart, so a fast stream costs tens of
// events a second, not one per token.
type deltas struct {
	d      *drive
	effect uint64
	mu     sync.Mutex
	buf    strings.Builder
	last   time.Time
	timer  *time.Timer
}

const deltaEvery = 50 * time.Millisecond

func newDeltas(d *drive, effect uint64) *deltas { return &deltas{d: d, effect: effect} }

func (x *deltas) add(text string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.buf.WriteString(text)
	switch wait := deltaEvery - time.Since(x.last); {
	case wait <= 0 || x.buf.Len() >= live.MaxText:
		x.flushLocked()
	case x.timer == nil:
		x.timer = time.AfterFunc(wait, x.flush)
	}
}

func (x *deltas) flush() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.flushLocked()
}

func (x *deltas) flushLocked() {
	if x.timer != nil {
		x.timer.Stop()
		x.timer = nil
	}
	if x.buf.Len() == 0 {
		return
	}
	for _, ev := range live.Deltas(x.effect, x.buf.String()) {
		x.d.publish(ev)
	}
	x.buf.Reset()
	x.last = time.Now()
}
