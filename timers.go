package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/triggers"
	"github.com/lash-run/lash/turn"
)

// timerConsumer is the durable consumer the nodes share over fired timers.
const timerConsumer = "lash-timers"

// Timer kinds: a sleep's end, and a look at a wait just parked (a signal
// or a process end that came before the commit that parked it).
const (
	timerSleep   = "sleep"
	timerRecheck = "recheck"
	// timerTimeout ends an event wait that had no resolution in time.
	timerTimeout = "timeout"
)

// recheckAfter is when a parked signal or process wait is looked at once:
// its signal or end may have come between the wait's tool call and the
// commit, when nothing was parked to wake.
const recheckAfter = 2 * time.Second

// dueRetries bounds how often a fired timer whose call is not parked yet
// (its turn still runs) is looked at again, a second apart; turn attempts
// are bounded too, so its turn has committed or failed long before.
const dueRetries = 900

// armWaits arms what wakes the calls a commit is about to park (ADR 0025):
// a timer at a sleep's end, and for signal and process waits an index
// entry by signal subject and a recheck timer. It runs before the commit,
// so a crash after the commit leaves them armed; a turn that never
// commits leaves timers that fire on no parked call and do nothing.
// Calls parked before this turn on the same ticket were armed by theirs;
// a call that parks again on another (a tool waiting for a second event)
// is armed anew.
func (s *Session) armWaits(ctx context.Context, before, after []turn.SuspendedCall) error {
	n, subj := s.n, s.n.client.Subjects()
	for _, sc := range after {
		if slices.ContainsFunc(before, func(b turn.SuspendedCall) bool {
			return b.Call.ID == sc.Call.ID && b.Ticket.Reason == sc.Ticket.Reason
		}) {
			continue
		}
		t, ok := parkedTicket(sc)
		if !ok || t.Kind == builtin.ApprovalTicket {
			continue // operators decide approvals
		}
		kind, at := timerRecheck, time.Now().Add(recheckAfter)
		if t.Kind == builtin.SleepTicket {
			kind, at = timerSleep, t.Until
		}
		if t.Kind == builtin.EventTicket {
			if !n.validTicket(t) {
				continue // not a node's ticket: nothing wakes it but a decision
			}
			if err := s.armEvent(ctx, t, sc.Call.ID); err != nil {
				return err
			}
		}
		if t.Kind == builtin.SignalTicket {
			w, err := subj.SignalWait(t.Subject, s.id, sc.Call.ID)
			if err != nil {
				return err
			}
			_, _, err = n.client.Append(ctx, streams.Publication{Subject: w, Data: []byte(t.Subject)}, 0)
			if ce := (*streams.ConflictError)(nil); err != nil && !errors.As(err, &ce) { // a conflict: indexed by an earlier run
				return err
			}
		}
		sched, err := subj.TimerAt(kind, s.id, sc.Call.ID)
		if err != nil {
			return err
		}
		due, err := subj.TimerDue(kind, s.id, sc.Call.ID)
		if err != nil {
			return err
		}
		if _, err := n.client.Schedule(ctx, streams.Timer{Subject: sched, Target: due, At: at}); err != nil {
			return err
		}
	}
	return nil
}

// wakeDue handles fired timers: one node takes each, and another takes it
// again if that node fails before it is done.
func (n *Node) wakeDue(ctx context.Context) error {
	d, err := n.client.Dispatcher(ctx, streams.Timers, timerConsumer, []string{n.client.Subjects().AllTimersDue()}, dispatchAckWait)
	if err != nil {
		return err
	}
	d.Serve(ctx, sideSlots, nil, func(dl *streams.Delivery) {
		if n.opts.hold != nil {
			n.opts.hold("timer", dl.Msg.Subject)
		}
		again, err := n.due(ctx, dl.Msg)
		if err == nil && !again {
			kind, a, _, _ := n.client.Subjects().TimerOf(dl.Msg.Subject)
			n.observe(Event{Kind: EventTimerFired, Session: a, Effect: kind, Took: time.Since(dl.Msg.Time)})
		}
		switch {
		case err != nil:
			n.retryOrGiveUp(ctx, dl, "fired timer", err)
		case again && dl.Delivered < dueRetries:
			_ = dl.Retry(time.Second)
		default:
			if again {
				n.opts.logger.Warn("fired timer given up: its call was never parked", "subject", dl.Msg.Subject, "tries", dl.Delivered)
			}
			n.settleTimer(ctx, dl)
		}
	}, func(err error) { n.opts.logger.Warn("timer fetch failed", "err", err) })
	return nil
}

// settleTimer acknowledges a fired timer that is done with and removes its
// message (ADR 0035): fired timers do not expire, so each is removed once
// handled. A timer fired again on the same subject since stays.
func (n *Node) settleTimer(ctx context.Context, dl *streams.Delivery) {
	if err := dl.AckSync(context.WithoutCancel(ctx)); err != nil {
		return // comes back, and is settled then
	}
	if err := n.client.PurgeBefore(context.WithoutCancel(ctx), dl.Msg.Subject, dl.Msg.Seq+1); err != nil {
		n.opts.logger.Warn("removing a fired timer; the sweep will", "subject", dl.Msg.Subject, "err", err)
	}
}

// due handles one fired timer. again asks to see it again: its call is
// not parked yet but its session has inputs waiting, so the turn that
// parks it has not committed.
func (n *Node) due(ctx context.Context, m *streams.Msg) (again bool, err error) {
	kind, session, call, err := n.client.Subjects().TimerOf(m.Subject)
	if err != nil {
		n.opts.logger.Warn("fired timer passed over", "subject", m.Subject, "err", err)
		return false, nil
	}
	if err := n.client.Verify(m); err != nil {
		n.opts.logger.Error("fired timer set aside", "subject", m.Subject, "seq", m.Seq, "err", err)
		n.observe(Event{Kind: EventInputRefused, Session: session, Err: err})
		return false, nil
	}
	if kind == triggers.TimerKind {
		return false, n.tick(ctx, session, m)
	}
	pc, found, pending, err := n.parkedCall(ctx, session, call)
	if err != nil || !found {
		return pending, err
	}
	switch {
	case kind == timerSleep && pc.ticket.Kind == builtin.SleepTicket:
		if time.Until(pc.ticket.Until) > time.Second {
			return true, nil // a timer that fired early (another clock): look again
		}
		return false, n.wake(ctx, pc, "slept until "+pc.ticket.Until.Format(time.RFC3339))
	case kind == timerRecheck && pc.ticket.Kind == builtin.SignalTicket:
		return false, n.wakeOnLastSignal(ctx, pc)
	case kind == timerRecheck && pc.ticket.Kind == builtin.ProcessTicket:
		return false, n.wakeOnProcessEnd(ctx, pc, nil)
	case kind == timerRecheck && pc.ticket.Kind == builtin.EventTicket && n.validTicket(pc.ticket):
		if _, err := n.resolutionOf(ctx, pc.ticket.Event); errors.Is(err, streams.ErrNotFound) {
			return false, nil // not resolved: its resolution wakes it
		} else if err != nil {
			return false, err
		}
		return false, n.wakeToRun(ctx, pc)
	case kind == timerTimeout && pc.ticket.Kind == builtin.EventTicket && n.validTicket(pc.ticket):
		// The timer is the call's: one set for an earlier wait of the same
		// call does not time out the event it waits for now.
		if pc.ticket.Deadline.IsZero() || time.Until(pc.ticket.Deadline) > time.Second {
			return false, nil
		}
		_, err := n.resolve(ctx, pc.ticket.Event, resolution{Kind: timedOutEvent})
		return false, err
	}
	return false, nil
}

// parkedCall finds a call its session holds parked on a built-in ticket,
// as the projection knows it once it has folded everything stored now;
// pending reports inputs waiting in the session.
func (n *Node) parkedCall(ctx context.Context, session, call string) (pc parkedCall, found, pending bool, err error) {
	if err := n.projectionCaughtUp(ctx); err != nil {
		return pc, false, false, err
	}
	return n.parkedFolded(session, call)
}

// parkedFolded is parkedCall on what the projection has folded already.
func (n *Node) parkedFolded(session, call string) (pc parkedCall, found, pending bool, err error) {
	h, err := n.proj.Session(session)
	if errors.Is(err, projector.ErrNotFound) || errors.Is(err, streams.ErrBadID) {
		return pc, false, false, nil
	}
	if err != nil {
		return pc, false, false, err
	}
	calls, err := n.proj.Suspended(h)
	if err != nil {
		return pc, false, false, nil // the projection set the commit aside already
	}
	for _, sc := range calls {
		if t, ok := parkedTicket(sc); ok && sc.Call.ID == call {
			return parkedCall{session: session, turn: h.LastTurn, call: sc.Call, waits: sc.WaitingID(), ticket: t, pending: h.PendingInputs > 0}, true, false, nil
		}
	}
	return pc, false, h.PendingInputs > 0, nil
}

// parkedOf lists the calls one session holds parked on built-in tickets.
func (n *Node) parkedOf(ctx context.Context, session string) ([]parkedCall, error) {
	if err := n.projectionCaughtUp(ctx); err != nil {
		return nil, err
	}
	h, err := n.proj.Session(session)
	if errors.Is(err, projector.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	calls, err := n.proj.Suspended(h)
	if err != nil {
		return nil, nil
	}
	var out []parkedCall
	for _, sc := range calls {
		if t, ok := parkedTicket(sc); ok {
			out = append(out, parkedCall{session: session, turn: h.LastTurn, call: sc.Call, waits: sc.WaitingID(), ticket: t, pending: h.PendingInputs > 0})
		}
	}
	return out, nil
}

// projectionCaughtUp waits until the projection has folded every session
// message stored now.
func (n *Node) projectionCaughtUp(ctx context.Context) error {
	last, err := n.client.LastSeq(ctx, streams.Sessions)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return n.proj.WaitFor(wctx, last)
}

// tick publishes a schedule's tick as its signal. The key names the fired
// message, so a redelivered tick is the same signal, and the same
// occurrence even past the dedupe window.
func (n *Node) tick(ctx context.Context, name string, m *streams.Msg) error {
	data, err := json.Marshal(triggers.Tick{Schedule: name, At: m.Time.UTC(), Seq: m.Seq})
	if err != nil {
		return err
	}
	subj := strings.TrimSuffix(n.client.Subjects().Signals(), ">") + triggers.CronSource + "." + name
	_, _, err = n.client.Publish(ctx, streams.Publication{Subject: subj, Data: data, MsgID: fmt.Sprintf("tick-%s-%d", name, m.Seq)})
	return err
}

// armEvent indexes an event wait by its id, so its resolution finds the
// call, and sets the timer of its timeout.
func (s *Session) armEvent(ctx context.Context, t builtin.Ticket, call string) error {
	n, subj := s.n, s.n.client.Subjects()
	w, err := subj.EventWait(t.Event)
	if err != nil {
		return err
	}
	b, err := json.Marshal(eventWait{Session: s.id, Call: call})
	if err != nil {
		return err
	}
	_, _, err = n.client.Append(ctx, streams.Publication{Subject: w, Data: b}, 0)
	if ce := (*streams.ConflictError)(nil); err != nil && !errors.As(err, &ce) {
		return err
	}
	if t.Deadline.IsZero() {
		return nil
	}
	sched, err := subj.TimerAt(timerTimeout, s.id, call)
	if err != nil {
		return err
	}
	due, err := subj.TimerDue(timerTimeout, s.id, call)
	if err != nil {
		return err
	}
	// Replaced: a timer an earlier wait of the same call set may stand.
	_, err = n.client.Schedule(ctx, streams.Timer{Subject: sched, Target: due, At: t.Deadline, Replace: true})
	return err
}
