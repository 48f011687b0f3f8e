package lash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/triggers"
	"github.com/lash-run/lash/turn"
)

// signalConsumer is the durable consumer the nodes share over signals.
const signalConsumer = "lash-signals"

// parkedCall is a call a session holds suspended on a built-in ticket.
type parkedCall struct {
	session string
	turn    string // the commit that left it suspended
	call    turn.ToolCall
	// waits names what waits: the call, or the call a parked program waits
	// on (turn.SuspendedCall.WaitingID), whose wake is its own.
	waits  string
	ticket builtin.Ticket
	// pending is set when the session has inputs waiting.
	pending bool
}

// Wake resumes calls parked by the built-in tools (tools/builtin): a sleep
// once its time has come, a signal wait once a signal arrives on its
// subject. It also delivers each signal to the trigger subscriptions it
// matches (package triggers): one process per subscription, whose end
// tells the subscription's wake target. It appends a decision to the call's session, which Serve then
// runs; decisions carry ids derived from the call, so nodes waking the same
// call at once change nothing twice. It runs until ctx ends and needs
// WithProjection: the projection says which calls are parked. Close stops
// it.
func (n *Node) Wake(ctx context.Context) error {
	if n.proj == nil {
		return errors.New("lash: Wake needs a projection (WithProjection)")
	}
	side, done, err := n.sideLoop(ctx)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithCancel(side)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- n.wakeSignals(ctx) }()
	go func() { errc <- n.wakeDue(ctx) }()
	go func() { errc <- n.router.Run(ctx) }()
	err = <-errc
	cancel()
	<-errc
	<-errc
	if side.Err() != nil {
		return nil // stopped, not failed
	}
	return err
}

// sideLoop registers a loop beside the turns (the waker, the process
// worker): Close waits for it, and its context ends once running turns
// are done. done must be called when the loop returns.
func (n *Node) sideLoop(ctx context.Context) (context.Context, func(), error) {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return nil, nil, ErrClosed
	}
	n.wakers.Add(1)
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(n.halt, cancel)
	return ctx, func() { stop(); cancel(); n.wakers.Done() }, nil
}

// wakeOnLastSignal wakes a signal wait if its subject holds a readable
// signal: the latest one. Unreadable signals wake nothing; they are in the
// signals' quarantine.
func (n *Node) wakeOnLastSignal(ctx context.Context, pc parkedCall) error {
	m, err := n.client.Head(ctx, pc.ticket.Subject)
	if errors.Is(err, streams.ErrNotFound) {
		return nil // none yet: the signal consumer sees it come
	}
	if err != nil {
		return err
	}
	if CheckSignal(m.Data) != nil {
		// The head is unreadable: an earlier signal may not be.
		var last *streams.Msg
		err := n.client.Read(ctx, pc.ticket.Subject, 0, func(sm *streams.Msg) error {
			if CheckSignal(sm.Data) == nil {
				last = sm
			}
			return nil
		})
		if err != nil || last == nil {
			return err
		}
		m = last
	}
	return n.wake(ctx, pc, string(m.Data))
}

// sideSlots bounds the signals, and apart from them the fired timers, a
// node handles at once.
const sideSlots = 16

func (n *Node) wakeSignals(ctx context.Context) error {
	d, err := n.client.Dispatcher(ctx, streams.Triggers, signalConsumer, []string{n.client.Subjects().Signals()}, dispatchAckWait)
	if err != nil {
		return err
	}
	// Each signal is handled as it arrives, so a wait wakes at once; one
	// whose node dies comes back to another within the ack wait.
	d.Serve(ctx, sideSlots, nil, func(dl *streams.Delivery) {
		if n.opts.hold != nil {
			n.opts.hold("signal", dl.Msg.Subject)
		}
		if err := n.signal(ctx, dl.Msg); err != nil {
			n.retryOrGiveUp(ctx, dl, "signal", err)
			return
		}
		_ = dl.Ack()
	}, func(err error) { n.opts.logger.Warn("signal fetch failed", "err", err) })
	return nil
}

// sideRetries bounds the deliveries of a signal or fired timer whose
// handling failed: they come back a second apart at first, a minute at
// most, so about an hour and a half in all.
const sideRetries = 100

// retryOrGiveUp settles a signal's or fired timer's delivery whose
// handling failed with err. It comes back later, unless err can never
// clear (bad input) or it came sideRetries times: then it is given up,
// which an error log and an event say. A parked call it would have woken
// stays parked, for an operator's decision.
func (n *Node) retryOrGiveUp(ctx context.Context, dl *streams.Delivery, what string, err error) {
	if ctx.Err() != nil {
		_ = dl.Retry(time.Second) // stopping: another node takes it
		return
	}
	if dl.Delivered < sideRetries && !errors.Is(err, ErrBadInput) && !errors.Is(err, streams.ErrTooLarge) {
		n.opts.logger.Warn(what+" not handled yet; it comes back", "subject", dl.Msg.Subject, "tries", dl.Delivered, "err", err)
		_ = dl.Retry(min(time.Second<<min(dl.Delivered-1, 6), time.Minute))
		return
	}
	n.opts.logger.Error(what+" given up", "subject", dl.Msg.Subject, "seq", dl.Msg.Seq, "tries", dl.Delivered, "err", err)
	n.observe(Event{Kind: EventWake, Err: fmt.Errorf("%s %s given up after %d tries: %w", what, dl.Msg.Subject, dl.Delivered, err)})
	if what == "fired timer" {
		n.settleTimer(ctx, dl)
		return
	}
	_ = dl.Ack()
}

// signal wakes every call waiting on the signal's subject.
func (n *Node) signal(ctx context.Context, m *streams.Msg) error {
	if err := checkSignalAt(n.client.Subjects(), m); err != nil {
		// Set aside where operators look (the signals' quarantine); nothing
		// waiting can take it.
		n.opts.logger.Warn("signal passed over", "subject", m.Subject, "seq", m.Seq, "err", err)
		n.observe(Event{Kind: EventWake, Err: err})
		return nil
	}
	if err := n.wakeWaits(ctx, m); err != nil {
		return err
	}
	if rest, ok := n.client.Subjects().SignalRest(m.Subject); ok && strings.HasPrefix(rest, "event.") {
		id, err := streams.ParseToken(strings.TrimPrefix(rest, "event."))
		if err != nil || strings.Contains(rest[len("event."):], ".") {
			n.opts.logger.Warn("event resolution refused: not a key of this deployment", "subject", m.Subject, "seq", m.Seq)
			return nil
		}
		return n.resolveSignal(ctx, m, id)
	}
	return n.deliver(ctx, m)
}

// wakeWaits wakes the calls parked on a signal's subject, found by the
// index armWaits keeps: waking costs what the waits on that subject do,
// however many calls are parked. Entries whose call is no longer parked
// (woken, or its session moved on) are removed.
func (n *Node) wakeWaits(ctx context.Context, m *streams.Msg) error {
	subj := n.client.Subjects()
	prefix := subj.SignalWaitsPrefix(m.Subject)
	var waits []string
	err := n.client.Read(ctx, prefix+">", 0, func(w *streams.Msg) error {
		if string(w.Data) == m.Subject { // the hash's subject, not another with the same prefix
			waits = append(waits, w.Subject)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(waits) == 0 {
		return nil
	}
	// One catch-up for all of them: the waits' commits are folded by then.
	if err := n.projectionCaughtUp(ctx); err != nil {
		return err
	}
	for _, w := range waits {
		session, call, err := subj.SignalWaitOf(w)
		if err != nil {
			continue
		}
		pc, found, pending, err := n.parkedFolded(session, call)
		if err != nil {
			return err
		}
		if found && pc.ticket.Kind == builtin.SignalTicket && pc.ticket.Subject == m.Subject {
			if err := n.wake(ctx, pc, string(m.Data)); err != nil {
				return err
			}
		} else if pending {
			continue // its turn may not have committed yet: the recheck timer looks again
		}
		if err := n.client.Purge(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// MaxSignalBytes caps one signal's payload.
const MaxSignalBytes = 64 << 10

// CheckSignal reports why a signal's payload cannot be delivered: it must
// be JSON of at most MaxSignalBytes.
func CheckSignal(data []byte) error {
	if len(data) > MaxSignalBytes {
		return fmt.Errorf("%w: signal of %d bytes, at most %d", ErrBadInput, len(data), MaxSignalBytes)
	}
	if !json.Valid(data) {
		return fmt.Errorf("%w: a signal's payload must be JSON", ErrBadInput)
	}
	return nil
}

// checkSignalAt is CheckSignal with the signal's subject: what follows
// "<prefix>.signal." is bounded too (triggers.MaxSourceBytes).
func checkSignalAt(subj streams.Subjects, m *streams.Msg) error {
	if rest, ok := subj.SignalRest(m.Subject); !ok || len(rest) > triggers.MaxSourceBytes {
		return fmt.Errorf("%w: a signal's subject after the prefix's signal token holds %d bytes: at most %d", ErrBadInput, len(rest), triggers.MaxSourceBytes)
	}
	return CheckSignal(m.Data)
}

// wakeAfterCommit wakes a signal wait at once when its signal came before
// the wait was committed (the signal consumer found nothing waiting then).
// The wait's recheck timer would find it within recheckAfter; this saves
// the wait.
func (s *Session) wakeAfterCommit(ctx context.Context, turnID string, suspended []turn.SuspendedCall) {
	n := s.n
	for _, sc := range suspended {
		t, ok := parkedTicket(sc)
		if ok && t.Kind == builtin.EventTicket && n.validTicket(t) {
			if _, err := n.resolutionOf(ctx, t.Event); err == nil {
				if err := n.wakeToRun(ctx, parkedCall{session: s.id, turn: turnID, call: sc.Call, waits: sc.WaitingID(), ticket: t}); err != nil && ctx.Err() == nil {
					n.opts.logger.Warn("waking an event wait", "session", s.id, "call", sc.Call.ID, "err", err)
				}
			}
			continue
		}
		if !ok || t.Kind != builtin.SignalTicket {
			continue
		}
		pc := parkedCall{session: s.id, turn: turnID, call: sc.Call, waits: sc.WaitingID(), ticket: t}
		if err := n.wakeOnLastSignal(ctx, pc); err != nil && ctx.Err() == nil {
			n.opts.logger.Warn("waking a signal wait", "session", s.id, "call", sc.Call.ID, "err", err)
		}
	}
}

// parkedTicket reads the ticket of a call parked by a built-in tool. The
// tool's name must match: a tool served elsewhere may write any ticket.
func parkedTicket(sc turn.SuspendedCall) (builtin.Ticket, bool) {
	t, ok := builtin.ParseTicket(sc.Ticket.Reason)
	tool := sc.WaitingTool() // a parked program's is the tool of the call it waits on
	switch {
	case !ok:
		return t, false
	case t.Kind == builtin.SleepTicket:
		return t, tool == builtin.SleepTool
	case t.Kind == builtin.SignalTicket:
		return t, tool == builtin.SignalTool
	case t.Kind == builtin.ProcessTicket:
		return t, tool == builtin.ProcessAwaitTool
	case t.Kind == builtin.EventTicket:
		return t, true // any tool's; its signature is checked before anything is armed or woken
	}
	return t, tool == builtin.ApprovalTool
}

// wake appends the decision that resumes a parked call with payload as its
// result. The decision's id and msg id name the call (call ids are unique
// in a session), so the first wake wins: nodes waking it at once, or for
// two signals, or across later turns that leave it parked, append it once
// within the dedupe window.
func (n *Node) wake(ctx context.Context, pc parkedCall, payload string) error {
	return n.wakeAs(ctx, pc, wakeID(pc.waits), payload)
}

// wakeAs is wake with the decision's id (and input key) given.
func (n *Node) wakeAs(ctx context.Context, pc parkedCall, id, payload string) error {
	return n.resume(ctx, pc, Decision{ID: id, CallID: pc.call.ID, Action: "resume", Mode: "use-result", Payload: payload})
}

// resume appends the decision d that resumes the parked call pc, under
// d's id as the input key. A payload the session's input cannot hold (a
// signal or a process result grows when quoted as a string) can never be
// appended: the call resumes with a result that says so, rather than stay
// parked while its wake is tried again and again.
func (n *Node) resume(ctx context.Context, pc parkedCall, d Decision) error {
	data, err := wakeInput(d)
	if err != nil {
		return err
	}
	_, dup, err := n.log.AppendDecision(ctx, pc.session, d.ID, data)
	if errors.Is(err, streams.ErrTooLarge) && d.Payload != "" {
		n.opts.logger.Error("a parked call's result is over the input limit; the call resumes with an error in its place",
			"session", pc.session, "call", pc.call.ID, "bytes", len(data), "limit", n.MaxInputBytes())
		d.Payload = fmt.Sprintf("lash: this call's result (%d bytes as a session input) is over the deployment's input limit of %d bytes and was not delivered",
			len(data), n.MaxInputBytes())
		if data, err = wakeInput(d); err != nil {
			return err
		}
		_, dup, err = n.log.AppendDecision(ctx, pc.session, d.ID, data)
	}
	if err == nil && !dup {
		n.observe(Event{Kind: EventWake, Session: pc.session, Turn: pc.turn})
	}
	return err
}

// wakeInput encodes the input that carries a wake's decision. Without
// HTML escaping, a payload's '<', '>' and '&' take a byte each, not six.
func wakeInput(d Decision) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(Input{Decisions: []Decision{d}}); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// wakeID names the wake of a call, within the bound on keys: a call id
// near the bound is named by its hash.
func wakeID(call string) string {
	if id := "wake:" + call; len(id) <= streams.MaxIDBytes {
		return id
	}
	sum := sha256.Sum256([]byte(call))
	return "wake:" + hex.EncodeToString(sum[:])
}

func parkedIn(p *projector.Projector) ([]parkedCall, error) {
	heads, err := p.SuspendedSessions()
	if err != nil {
		return nil, err
	}
	var out []parkedCall
	for _, h := range heads {
		calls, err := p.Suspended(&h)
		if err != nil {
			continue // the projection set the commit aside already
		}
		for _, sc := range calls {
			if t, ok := parkedTicket(sc); ok {
				out = append(out, parkedCall{session: h.Session, turn: h.LastTurn, call: sc.Call, waits: sc.WaitingID(), ticket: t, pending: h.PendingInputs > 0})
			}
		}
	}
	return out, nil
}

// ParkedWait is a call parked by a built-in tool, and what wakes it.
type ParkedWait struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Call    string `json:"call"`
	Tool    string `json:"tool"`
	// Kind is the ticket's: sleep-until, signal, process or approval.
	Kind string `json:"kind"`
	// WokenBy says what wakes it: a timer at a time, a signal subject, a
	// process's end, or an operator's decision.
	WokenBy string    `json:"woken_by"`
	Until   time.Time `json:"until,omitzero"`
	// Pending: the session has inputs waiting, which may be its wake.
	Pending bool `json:"pending,omitempty"`
}

// ParkedWaits lists the calls parked on built-in tickets that p has
// folded, with what wakes each.
func ParkedWaits(p *projector.Projector) ([]ParkedWait, error) {
	calls, err := parkedIn(p)
	if err != nil {
		return nil, err
	}
	out := make([]ParkedWait, 0, len(calls))
	for _, c := range calls {
		w := ParkedWait{Session: c.session, Turn: c.turn, Call: c.call.ID, Tool: c.call.Name, Kind: c.ticket.Kind, Pending: c.pending}
		switch c.ticket.Kind {
		case builtin.SleepTicket:
			w.WokenBy, w.Until = "timer at "+c.ticket.Until.UTC().Format(time.RFC3339), c.ticket.Until.UTC()
		case builtin.SignalTicket:
			w.WokenBy = "signal " + c.ticket.Subject
		case builtin.ProcessTicket:
			w.WokenBy = "end of process " + c.ticket.Process
		case builtin.EventTicket:
			w.WokenBy = "event " + c.ticket.Event
			if !c.ticket.Deadline.IsZero() {
				w.WokenBy += ", or its timeout at " + c.ticket.Deadline.UTC().Format(time.RFC3339)
				w.Until = c.ticket.Deadline.UTC()
			}
		default:
			w.WokenBy = "a decision (lash-admin decide)"
		}
		out = append(out, w)
	}
	return out, nil
}

// Awaiting says what a call a turn left suspended waits for: "decision"
// (a person's resume or cancel: wait_for_approval, a hook's or a tool's
// own suspend), or the wake a node delivers by itself: "sleep", "signal",
// "process" or "event". tool is the call's tool, reason its ticket.
func Awaiting(tool, reason string) string {
	t, ok := parkedTicket(turn.SuspendedCall{Call: turn.ToolCall{Name: tool}, Ticket: turn.Ticket{Reason: reason}})
	if ok {
		switch t.Kind {
		case builtin.SleepTicket:
			return "sleep"
		case builtin.SignalTicket:
			return "signal"
		case builtin.ProcessTicket:
			return "process"
		case builtin.EventTicket:
			return "event"
		}
	}
	return "decision"
}
