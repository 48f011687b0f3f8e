package processes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
)

// Executor does a process's work for one attempt and returns its result
// (any JSON value). ctx ends when a cancel is requested, another writer
// ends the process, or the worker stops; the worker then decides what the attempt's outcome
// is. An error is the process's failure; an *ExecError names its code.
type Executor interface {
	Execute(ctx context.Context, run *Run) (json.RawMessage, error)
}

// MaxAttempts bounds the attempts at a process: one that began that many
// and never ended is marked abandoned (writer gave_up) instead of run
// again.
const MaxAttempts = 8

// ErrRetryable marks an executor's error as a failure of the moment (a
// stream read, the network), not of the work: the attempt is handed back
// for another, within MaxAttempts.
var ErrRetryable = errors.New("processes: retryable")

// Retryable marks err as ErrRetryable.
func Retryable(err error) error { return fmt.Errorf("%w: %w", ErrRetryable, err) }

// ExecError is a failure with a code for the failed event.
type ExecError struct {
	Code    string
	Message string
}

func (e *ExecError) Error() string { return e.Code + ": " + e.Message }

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	Registry *Registry
	Leases   *leases.Manager
	Store    Store
	Executor Executor
	// Class names the pool of slots a process's attempts take, and how
	// many attempts of that class may run at once (0: Concurrency): work
	// that hangs (a tool that never answers) then holds only the slots of
	// its own class, and a sub-agent that waits for an approval holds none
	// of a tool's. nil: every process is of one class.
	Class func(p *Process) (name string, limit int)
	// Concurrency bounds the attempts of one class running at once, unless
	// Class says otherwise. Default 16.
	Concurrency int
	// MaxRunning bounds the attempts running at once, all classes
	// together: each is a goroutine. Default 1024.
	MaxRunning int
	// Sweep is how often every process not ended is looked at again: work
	// handed back for the moment runs again then. Default 15s.
	Sweep time.Duration
	// Watch is how often the runners of processes run elsewhere are looked
	// at for proof of death (their PID on this host, their node's
	// liveness), so their work is taken over at once, not at the next
	// sweep. Default 500ms.
	Watch  time.Duration
	Logger *slog.Logger
	// OnEnd is called for each process the worker sees end, from its
	// reading loop (it must not block for long): live is false for those
	// read while the worker caught up with the stream at its start, which
	// may have been seen to before.
	OnEnd func(p *Process, live bool)
}

// Worker runs the processes of a deployment on one node: those nobody
// runs, and those whose runner is gone, by the rule of their disposition
// (Recover). It follows the PROCESSES stream from its start, keeping the
// processes that have not ended, so a registration is run as soon as it
// is stored and a cancel request reaches the attempt running it. Any
// number of workers share a deployment: the compare-and-set of an
// attempt's started event decides which one runs it, and its runner's
// node's liveness how long it is left to that one.
type Worker struct {
	cfg  WorkerConfig
	subj streams.Subjects

	mu      sync.Mutex
	open    map[string]*Process // processes not ended, as folded from the stream
	running map[string]context.CancelCauseFunc
	applied uint64        // the last sequence the reader folded
	caught  bool          // the reader has caught up with the stream once
	caughtC chan struct{} // closed then
	kick    chan string
	// runCtx is Run's context while it runs, for attempts begun by the
	// registry; stopping is set when Run stops taking them.
	runCtx   context.Context
	stopping bool
	// lapsed: the node's liveness lapsed (Lapsed) and is not back (Alive);
	// the worker begins nothing meanwhile.
	lapsed bool
	// waiters are the local awaiters of processes not ended (watch).
	waiters map[string][]chan *Process
	// endedHere holds the ends attempts here wrote, of processes still
	// open, until the reader folds them: an awaiter that watches after
	// the end was told is told it at once.
	endedHere map[string]*Process
	slots     slots
	wg        sync.WaitGroup
}

// ErrCancelRequested is the cause (context.Cause) of an attempt's context
// ended by a cancel request, for executors that stop work elsewhere.
var ErrCancelRequested = errors.New("processes: cancel requested")

// cancelRequested is the cause of an attempt's context that a cancel
// request ended, with the request: the attempt's fold, read again from a
// replica that has not had it yet, may lack it.
type cancelRequested struct{ req *Event }

func (c *cancelRequested) Error() string        { return ErrCancelRequested.Error() }
func (c *cancelRequested) Is(target error) bool { return target == ErrCancelRequested }

// Causes that end an attempt's context.
var (
	errEndedElsewhere = errors.New("processes: ended by another writer")
	// errMoved: the log moved under a decision, and the facts it rested on
	// with it; the process is looked at again. errMovedToEnd: it moved to the
	// process's end, which the reader reports.
	errMoved      = errors.New("processes: the log moved under the decision")
	errMovedToEnd = fmt.Errorf("%w: the process ended", errMoved)
	errLapsed     = errors.New("processes: the node's liveness lapsed")
)

// Lapsed tells the worker that its node's liveness lapsed: no beat landed
// while the node could trust its key, or a beat that landed found the key
// gone. Every other node may have taken the node for dead and its
// attempts over, so the attempts running here stop, as at a drain (handed
// back; started owner-bound work marked abandoned, writes the new runner's
// token fences), and until Alive the worker begins no attempt and takes
// over nothing: a node that cannot show it is alive runs no work.
func (w *Worker) Lapsed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lapsed = true
	for _, cancel := range w.running {
		cancel(errLapsed)
	}
}

// Alive ends a lapse: the node's liveness key is its own again.
func (w *Worker) Alive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lapsed = false
}

// NewWorker returns a worker; Run starts it.
func NewWorker(cfg WorkerConfig) *Worker {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 1024
	}
	if cfg.Sweep == 0 {
		cfg.Sweep = 15 * time.Second
	}
	if cfg.Watch == 0 {
		cfg.Watch = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{cfg: cfg, subj: cfg.Store.Subjects(), open: map[string]*Process{}, running: map[string]context.CancelCauseFunc{},
		caughtC: make(chan struct{}), kick: make(chan string, 1024), slots: newSlots(cfg.MaxRunning)}
	return w
}

// Run works until ctx ends. Attempts running then are stopped: owner-bound
// work that started is marked abandoned by its owner's drain, other work
// is handed back (released) for another worker to run again. One worker
// runs beside a registry at a time (one per node): Run refuses a second.
func (w *Worker) Run(parent context.Context) error {
	// An attempt that names this worker's node and that it does not run
	// is taken for stopped: two workers of one node would take each
	// other's for stopped, so a registry has one at a time.
	if !w.cfg.Registry.worker.CompareAndSwap(nil, w) {
		return errors.New("processes: a worker runs beside this registry already")
	}
	defer w.cfg.Registry.worker.CompareAndSwap(w, nil)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	w.mu.Lock()
	w.runCtx, w.stopping = ctx, false
	w.mu.Unlock()
	readErr := make(chan error, 1)
	go func() { readErr <- w.read(ctx) }()
	t := time.NewTicker(w.cfg.Sweep)
	defer t.Stop()
	watch := time.NewTicker(w.cfg.Watch)
	defer watch.Stop()
	caught := w.caughtC
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-caught:
			caught = nil
			w.sweep(ctx)
		case err = <-readErr:
			if ctx.Err() == nil {
				w.cfg.Logger.Warn("process worker stopped reading the processes", "err", err)
			}
			break loop
		case pid := <-w.kick:
			w.consider(ctx, pid)
		case <-t.C:
			w.sweep(ctx)
		case <-watch.C:
			if caught == nil {
				w.watchRunners(ctx)
			}
		}
	}
	w.mu.Lock()
	w.stopping = true
	for pid := range w.waiters {
		w.tell(pid, nil) // they follow the stream themselves
	}
	w.mu.Unlock()
	cancel()
	w.wg.Wait()
	if parent.Err() != nil {
		return nil
	}
	return err
}

// Open lists the processes not ended, as the worker knows them.
func (w *Worker) Open() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.open))
	for id := range w.open {
		ids = append(ids, id)
	}
	return ids
}

// read follows the stream, folding every process that has not ended. It
// reads the prune marks too: a reader behind a prune never gets the ends
// the purge took, and would hold the folds of processes begun here (or
// read in part) for good.
func (w *Worker) read(ctx context.Context) error {
	filters := []string{w.subj.AllProcessEvents(), w.subj.AllProcessMarks()}
	// An empty stream delivers nothing to tell the reader it caught up.
	if _, err := w.cfg.Store.NextOnSubjects(ctx, filters, 1); errors.Is(err, streams.ErrNotFound) {
		w.mu.Lock()
		if !w.caught {
			w.caught = true
			close(w.caughtC)
		}
		w.mu.Unlock()
	}
	return w.cfg.Store.Tail(ctx, streams.Processes, filters, 1, func(m *streams.Msg, pending uint64) error {
		if ended, live := w.apply(m); ended != nil && w.cfg.OnEnd != nil {
			w.cfg.OnEnd(ended, live)
		}
		if pending == 0 {
			w.mu.Lock()
			if !w.caught {
				w.caught = true
				close(w.caughtC)
			}
			w.mu.Unlock()
		}
		return nil
	})
}

// apply folds one message into the open processes and returns the
// process it ended, if it ended one.
func (w *Worker) apply(m *streams.Msg) (ended *Process, live bool) {
	pid, err := w.subj.ProcessOf(m.Subject)
	if err != nil {
		w.cfg.Logger.Warn("a message on no process's subject", "subject", m.Subject, "seq", m.Seq)
		return nil, false
	}
	var e Event
	mark, signed := strings.HasSuffix(m.Subject, ".gone"), false
	if mark {
		signed = w.cfg.Store.Verify(m) == nil
	} else {
		e, signed, err = signedEvent(w.cfg.Store, m)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = max(w.applied, m.Seq)
	p := w.open[pid]
	if p != nil && m.Seq <= p.Head {
		return nil, false // adopted from its registry with this event folded
	}
	if mark {
		// Only ended processes are pruned, and the mark is written before
		// the purge: what of the log came before it was read or is gone. A
		// fold whose head is past the mark is of a later registration.
		if p != nil && signed {
			w.forget(pid)
			w.tell(pid, nil) // they follow the stream, and find the mark
			if cancel := w.running[pid]; cancel != nil {
				cancel(errEndedElsewhere)
			}
		}
		return nil, false
	}
	if !signed {
		w.cfg.Logger.Error("process event set aside: not signed by the deployment", "process", pid, "seq", m.Seq)
		if p != nil {
			p.passOver(m.Seq)
		}
		return nil, false
	}
	if err == nil && e.Type == TypeRegistered {
		p = &Process{ID: pid}
	}
	if p == nil {
		return nil, false // ended, or its log was set aside
	}
	if err == nil {
		err = p.apply(e)
	}
	if err != nil {
		// Left for an operator: recovery never acts on a log it cannot read.
		w.cfg.Logger.Error("process log unreadable; the process is left as it is", "process", pid, "seq", m.Seq, "err", err)
		w.forget(pid)
		w.tell(pid, nil)
		return nil, false
	}
	w.open[pid] = p
	cancel := w.running[pid]
	switch {
	case p.Ended():
		w.forget(pid)
		w.tell(pid, p)
		if cancel != nil {
			cancel(errEndedElsewhere)
		}
		return p, w.caught
	case e.Type == TypeCancelRequested && cancel != nil:
		cancel(&cancelRequested{req: p.CancelRequested})
	}
	if w.caught && (e.Type == TypeRegistered || e.Type == TypeCancelRequested || e.Type == TypeAbandonRequested) {
		select {
		case w.kick <- pid:
		default: // the sweep comes soon
		}
	}
	return nil, false
}

// watchRunners looks at the runners of the processes run elsewhere (the
// newest attempt's) and considers at once those of every runner proved
// dead: its PID gone on this host (no round trip), or its node's liveness
// gone (one read per runner, not per process).
func (w *Worker) watchRunners(ctx context.Context) {
	w.mu.Lock()
	byOwner := map[leases.Owner][]string{}
	for pid, p := range w.open {
		if _, here := w.running[pid]; here || !p.InAttempt() {
			continue
		}
		o := p.LastStart.Owner.Lease()
		byOwner[o] = append(byOwner[o], pid)
	}
	w.mu.Unlock()
	for o, pids := range byOwner {
		if ctx.Err() != nil {
			return
		}
		if w.own(o) {
			continue // this worker's: a sweep takes up those it stopped
		}
		if ev, err := w.cfg.Leases.DeathEvidence(ctx, o); err != nil || ev == "" {
			continue
		}
		for _, pid := range pids {
			w.consider(ctx, pid)
		}
	}
}

func (w *Worker) sweep(ctx context.Context) {
	for _, pid := range w.Open() {
		if ctx.Err() != nil {
			return
		}
		w.consider(ctx, pid)
	}
}

// consider applies the recovery rule to one process, starting an attempt
// when the rule says so and a slot is free.
func (w *Worker) consider(ctx context.Context, pid string) {
	w.mu.Lock()
	p, ok := w.open[pid]
	_, busy := w.running[pid]
	lapsed := w.lapsed
	var snap *Process
	if ok {
		snap = p.clone()
	}
	w.mu.Unlock()
	if !ok || busy || lapsed {
		return
	}
	var f Facts
	if snap.InAttempt() && snap.Registration.Disposition != ExternallyOwned {
		if o := snap.LastStart.Owner.Lease(); w.own(o) {
			// This worker started it and does not run it (not busy above):
			// the attempt stopped with no outcome written.
			f.RunnerGone = fmt.Sprintf("its runner stopped attempt %d (token %d) with no outcome written", snap.LastStart.Attempt, snap.LastStart.Token)
		} else {
			ev, err := w.cfg.Leases.DeathEvidence(ctx, o)
			if err != nil {
				w.cfg.Logger.Warn("checking a process runner's liveness", "process", pid, "err", err)
				return
			}
			f.RunnerGone = ev
		}
	}
	action, why := Recover(snap, f)
	switch action {
	case Leave:
		return
	case FinishRequested:
		a := Abandonment{Writer: ReconciledRequest, Evidence: why}
		if _, _, err := w.cfg.Registry.Finish(ctx, pid, TypeAbandoned, a, ByReconciledRequest); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("abandoning externally owned work on request", "process", pid, "err", err)
		}
		return
	}
	class, limit := w.classOf(snap)
	if !w.slots.take(class, limit, pid) {
		return // every slot of its class is taken: it is looked at when one frees
	}
	actx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	if w.lapsed { // since the look above
		w.mu.Unlock()
		cancel(nil)
		w.slots.give(class) // one waiting for it is found by the sweep
		return
	}
	w.running[pid] = cancel
	w.mu.Unlock()
	w.wg.Add(1)
	go w.runAttempt(ctx, pid, class, cancel, string(action), func() error { return w.attempt(actx, snap, f) })
}

// moved is what a decision made on a fold behind the log returns once
// the fold was caught up (now): the worker keeps the fresher fold, so the
// look again decides on it, not on what its reader has not delivered yet
// (of workers racing to start one process, the losers then see the
// winner's attempt at once). An ended fold is left for the reader, which
// reports the end.
func (w *Worker) moved(now *Process) error {
	if now.Ended() {
		return errMovedToEnd
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if have, ok := w.open[now.ID]; ok && now.Head > have.Head {
		w.open[now.ID] = now.clone()
	}
	return errMoved
}

// own reports whether o is this worker's node, this incarnation.
func (w *Worker) own(o leases.Owner) bool {
	self := w.cfg.Leases.Owner()
	return o.ID == self.ID && o.Incarnation == self.Incarnation
}

// classOf is the pool of slots p's attempts take, and its size.
func (w *Worker) classOf(p *Process) (string, int) {
	class, limit := "", 0
	if w.cfg.Class != nil {
		class, limit = w.cfg.Class(p)
	}
	if limit <= 0 {
		limit = w.cfg.Concurrency
	}
	return class, limit
}

// runAttempt is the goroutine of one attempt: fn, then its running mark
// and its slot given back, and the process looked at again when the log
// moved under it.
func (w *Worker) runAttempt(ctx context.Context, pid, class string, cancel context.CancelCauseFunc, action string, fn func() error) {
	defer w.wg.Done()
	var moved bool
	defer func() {
		cancel(nil)
		w.mu.Lock()
		delete(w.running, pid)
		w.mu.Unlock()
		next := []string{w.slots.give(class)}
		if moved {
			next = append(next, pid) // decided again on the log as the reader folds it
		}
		for _, id := range next {
			if id == "" {
				continue
			}
			select {
			case w.kick <- id:
			default: // the sweep comes to it
			}
		}
	}()
	err := fn()
	if moved = errors.Is(err, errMoved) && !errors.Is(err, errMovedToEnd); !moved && err != nil && !errors.Is(err, errMovedToEnd) && ctx.Err() == nil {
		w.cfg.Logger.Warn("process attempt", "process", pid, "action", action, "err", err)
	}
}

// attempt decides and acts. p is the worker's fold of the process from
// the stream: every write below is a compare-and-set at its head, which
// fails if the fold is behind and brings it up to date
// (Registry.appendWith), so the decision is made again on the log as it
// stands (errMoved when it no longer holds). The started event is the
// claim: of two workers starting on one head, one lands.
//
// Every write has a deadline of its own (write), never the attempt's: the
// work may have run far past any request timeout, or been stopped by a
// drain, and its outcome must still be written.
func (w *Worker) attempt(ctx context.Context, p *Process, f Facts) error {
	pid := p.ID
	action, why := Recover(p, f)
	var owner *Owner
	if p.LastStart != nil {
		o := p.LastStart.Owner
		owner = &o
	}
	decided, start := p.Head, p.LastStart
	guard := func(now *Process) error {
		if now.Head == decided {
			return nil
		}
		if now.LastStart != start {
			return w.moved(now)
		}
		if a, _ := Recover(now, f); a != action || now.Attempts() >= MaxAttempts && action == Execute {
			return w.moved(now)
		}
		decided = now.Head
		return nil
	}
	// Recovery's writes take a token newer than any on the log, fencing
	// out the runner it takes over from.
	appendEvent := func(typ string, data json.RawMessage) error {
		return write(ctx, func(ctx context.Context) error {
			_, _, err := w.cfg.Registry.appendWith(ctx, pid, p, func(now *Process) (Event, error) {
				return Event{Type: typ, Token: now.Token + 1, Data: data}, guard(now)
			})
			return err
		})
	}
	switch action {
	case Leave, FinishRequested:
		return nil
	case CancelRun:
		return appendEvent(TypeCancelled, jsonData(Request{Reason: why}))
	case AbandonDead:
		return appendEvent(TypeAbandoned, jsonData(Abandonment{Writer: Sweep, Owner: owner, Evidence: why}))
	case HonourAbandon:
		return appendEvent(TypeAbandoned, jsonData(Abandonment{Writer: ReconciledRequest, Owner: owner, Evidence: why}))
	}
	if p.Attempts() >= MaxAttempts {
		return appendEvent(TypeAbandoned, jsonData(Abandonment{Writer: GaveUp, Owner: owner,
			Evidence: fmt.Sprintf("%d attempts began and none ended", p.Attempts())}))
	}
	run, err := w.cfg.Registry.startOn(ctx, p, w.cfg.Leases.Owner(), guard)
	if err != nil {
		return err
	}
	if run.Process().CancelRequested != nil {
		// Requested before the start: the reader may have passed it
		// before this attempt was registered as running.
		w.cancel(pid, &cancelRequested{req: run.Process().CancelRequested})
	}
	return w.execute(ctx, run)
}

// execute runs an attempt that started and writes its outcome.
func (w *Worker) execute(ctx context.Context, run *Run) error {
	p := run.Process()
	pid := p.ID
	res, err := w.cfg.Executor.Execute(ctx, run)
	cause := context.Cause(ctx)
	if ctx.Err() == nil {
		cause = nil
	}
	switch {
	case errors.Is(cause, errEndedElsewhere):
		return nil
	case err == nil:
		// Done, whatever came meanwhile: the work's outcome stands.
		err = w.settle(ctx, func(wctx context.Context) error {
			var err error
			if len(res) > MaxDataBytes {
				_, err = run.Fail(wctx, Failure{Code: "result_too_large", Message: fmt.Sprintf("a result of %d bytes, at most %d", len(res), MaxDataBytes)})
			} else {
				_, err = run.Complete(wctx, res)
			}
			return err
		})
	case errors.Is(cause, ErrCancelRequested):
		err = w.settle(ctx, func(wctx context.Context) error {
			if err := run.Refresh(wctx); err != nil {
				return err
			}
			reason := "cancel requested"
			cr := run.Process().CancelRequested
			if c := (*cancelRequested)(nil); cr == nil && errors.As(cause, &c) {
				cr = c.req
			}
			if cr != nil {
				reason = cancelReason(cr)
			}
			_, err := run.Cancelled(wctx, reason)
			return err
		})
	case cause != nil:
		// The worker stops, or its node's liveness lapsed: owner-bound
		// work that started is not run again, so its owner says it is
		// abandoned; other work is handed back for another worker to run.
		if p.Registration.Disposition == OwnerBound {
			err = w.settle(ctx, func(wctx context.Context) error { _, err := run.Drained(wctx); return err })
		} else {
			err = w.settle(ctx, func(wctx context.Context) error { _, err := run.Release(wctx); return err })
		}
	case errors.Is(err, ErrRetryable) && run.Attempt() < MaxAttempts && p.Registration.Disposition != OwnerBound:
		w.cfg.Logger.Warn("process attempt failed for now; it runs again", "process", pid, "attempt", run.Attempt(), "err", err)
		// Handed back: the next sweep (here or on any node) begins the
		// next attempt.
		err = w.settle(ctx, func(wctx context.Context) error { _, err := run.Release(wctx); return err })
	default:
		var xe *ExecError
		if !errors.As(err, &xe) {
			xe = &ExecError{Code: "error", Message: err.Error()}
		}
		err = w.settle(ctx, func(wctx context.Context) error {
			_, err := run.Fail(wctx, Failure{Code: xe.Code, Message: xe.Message})
			return err
		})
	}
	if err == nil {
		w.ended(run.Process())
	}
	if errors.Is(err, ErrTerminal) || errors.Is(err, ErrFenced) {
		return nil // ended, or taken over, by another writer first
	}
	return err
}

// writeTimeout bounds one write of the worker (an event),
// whatever deadline the work had.
const writeTimeout = streams.DefaultTimeout

// write makes one write under a deadline of its own, also after ctx ended.
func write(ctx context.Context, fn func(ctx context.Context) error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	return fn(wctx)
}

// settleTries bounds the tries of an outcome write: 100 ms doubling to 2 s
// apart, about 7 s in all, each try with its own deadline.
const settleTries = 8

// settle makes an outcome write, trying again after failures of the
// moment: an outcome lost to a blip would run the work again, or leave
// started owner-bound work open until its node is shown gone. When the
// tries run out the attempt stays on the log with no outcome, and this
// worker, its runner, takes it up again as stopped.
func (w *Worker) settle(ctx context.Context, fn func(ctx context.Context) error) error {
	var err error
	for try := range settleTries {
		if err = write(ctx, fn); err == nil || permanent(err) {
			return err
		}
		w.cfg.Logger.Warn("writing a process's outcome; trying again", "try", try+1, "err", err)
		time.Sleep(min(time.Duration(100<<try)*time.Millisecond, 2*time.Second))
	}
	return err
}

func permanent(err error) bool {
	for _, e := range []error{ErrTerminal, ErrFenced, ErrInvalid, ErrRefused, ErrConflict, ErrCorrupt, ErrUnknown} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (w *Worker) cancel(pid string, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cancel := w.running[pid]; cancel != nil {
		cancel(cause)
	}
}
