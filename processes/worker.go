package processes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
)

// Executor does a process's work for one attempt and returns its result
// (any JSON value). ctx ends when a cancel is requested, the lease is lost
// or the worker stops; the worker then decides what the attempt's outcome
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
	// TTL of the process leases the worker claims. Default 15s.
	TTL time.Duration
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
	// together: each is a goroutine and a lease renewed every third of its
	// TTL. Default 1024.
	MaxRunning int
	// Sweep is how often every process not ended is looked at again, for
	// runners that vanished. Default TTL.
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
// number of workers share a deployment; the process lease decides which
// one runs an attempt.
type Worker struct {
	cfg  WorkerConfig
	subj streams.Subjects

	mu      sync.Mutex
	open    map[string]*Process // processes not ended, as folded from the stream
	running map[string]context.CancelCauseFunc
	// stopped holds the lease token of each started owner-bound attempt
	// this worker stopped with no outcome written (its lease lost, or the
	// outcome's writes failing): the runner's own word that the attempt
	// is gone, though its node lives.
	stopped map[string]uint64
	// heldBy is the holder of each process lease a claim found busy: a
	// runner whose start is not on the log yet, watched like the others.
	heldBy  map[string]leases.Owner
	applied uint64        // the last sequence the reader folded
	caught  bool          // the reader has caught up with the stream once
	caughtC chan struct{} // closed then
	kick    chan string
	adoptFn *func(*Process) // handed to the registry while Run runs
	slots   slots
	wg      sync.WaitGroup
}

// ErrCancelRequested is the cause (context.Cause) of an attempt's context
// ended by a cancel request, for executors that stop work elsewhere.
var ErrCancelRequested = errors.New("processes: cancel requested")

// Causes that end an attempt's context.
var (
	errCancelRequested = ErrCancelRequested
	errLeaseLost       = errors.New("processes: lease lost")
	errEndedElsewhere  = errors.New("processes: ended by another writer")
	// errMoved: the log moved under a decision, and the facts it rested on
	// with it; the process is looked at again.
	errMoved = errors.New("processes: the log moved under the decision")
)

// NewWorker returns a worker; Run starts it.
func NewWorker(cfg WorkerConfig) *Worker {
	if cfg.TTL == 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 1024
	}
	if cfg.Sweep == 0 {
		cfg.Sweep = cfg.TTL
	}
	if cfg.Watch == 0 {
		cfg.Watch = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{cfg: cfg, subj: cfg.Store.Subjects(), open: map[string]*Process{}, running: map[string]context.CancelCauseFunc{}, stopped: map[string]uint64{}, heldBy: map[string]leases.Owner{},
		caughtC: make(chan struct{}), kick: make(chan string, 1024), slots: newSlots(cfg.MaxRunning)}
	adopt := w.adopt
	w.adoptFn = &adopt
	return w
}

// adopt takes a process its registry just created as if the reader had
// delivered its registration, saving the hop through the stream; the
// reader then passes over what is folded already.
func (w *Worker) adopt(p *Process) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.caught || p.Head <= w.applied {
		return // the reader has it, or its catching up looks at everything
	}
	if _, ok := w.open[p.ID]; ok {
		return
	}
	w.open[p.ID] = p
	select {
	case w.kick <- p.ID:
	default: // the sweep comes soon
	}
}

// Run works until ctx ends. Attempts running then are stopped: owner-bound
// work that started is marked abandoned by its owner's drain, other work
// is handed back (its lease released) for another worker to run again.
func (w *Worker) Run(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	w.cfg.Registry.adopt.Store(w.adoptFn)
	defer w.cfg.Registry.adopt.CompareAndSwap(w.adoptFn, nil)
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

// read follows the stream, folding every process that has not ended.
func (w *Worker) read(ctx context.Context) error {
	return w.cfg.Store.Tail(ctx, streams.Processes, []string{w.subj.AllProcessEvents()}, 1, func(m *streams.Msg, pending uint64) error {
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
	e, signed, err := signedEvent(w.cfg.Store, m)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = max(w.applied, m.Seq)
	p := w.open[pid]
	if p != nil && m.Seq <= p.Head {
		return nil, false // adopted from its registry with this event folded
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
		delete(w.open, pid)
		delete(w.stopped, pid)
		delete(w.heldBy, pid)
		return nil, false
	}
	w.open[pid] = p
	cancel := w.running[pid]
	switch {
	case p.Ended():
		delete(w.open, pid)
		delete(w.stopped, pid)
		delete(w.heldBy, pid)
		if cancel != nil {
			cancel(errEndedElsewhere)
		}
		return p, w.caught
	case e.Type == TypeCancelRequested && cancel != nil:
		cancel(errCancelRequested)
	case e.Type == TypeStarted:
		delete(w.heldBy, pid) // its runner is on the log now
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
// newest attempt's, or a lease's holder that has not started yet) and
// considers at once those of every runner proved dead: its PID gone on
// this host (no round trip), or its node's liveness gone (one read per
// runner, not per process).
func (w *Worker) watchRunners(ctx context.Context) {
	w.mu.Lock()
	byOwner := map[leases.Owner][]string{}
	for pid, p := range w.open {
		if _, here := w.running[pid]; here {
			continue
		}
		if o, ok := w.heldBy[pid]; ok {
			byOwner[o] = append(byOwner[o], pid)
		} else if p.LastStart != nil {
			o := p.LastStart.Owner.Lease()
			byOwner[o] = append(byOwner[o], pid)
		}
	}
	w.mu.Unlock()
	self := w.cfg.Leases.Owner()
	for o, pids := range byOwner {
		if ctx.Err() != nil {
			return
		}
		if o.ID == self.ID && o.Incarnation == self.Incarnation {
			continue // this worker: its own stops are noted where they happen
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
	var snap *Process
	if ok {
		snap = p.clone()
	}
	w.mu.Unlock()
	if !ok || busy {
		return
	}
	var f Facts
	if snap.Registration.Disposition == OwnerBound && snap.Started() {
		ev, err := w.cfg.Leases.DeathEvidence(ctx, snap.LastStart.Owner.Lease())
		if err != nil {
			w.cfg.Logger.Warn("checking a process runner's liveness", "process", pid, "err", err)
			return
		}
		f.OwnerDead = ev
		w.mu.Lock()
		token, stopped := w.stopped[pid]
		w.mu.Unlock()
		if ev == "" && stopped && snap.LastStart.Token == token {
			f.OwnerDead = fmt.Sprintf("its runner stopped attempt %d (lease token %d) with no outcome written", snap.LastStart.Attempt, token)
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
	class, limit := "", 0
	if w.cfg.Class != nil {
		class, limit = w.cfg.Class(snap)
	}
	if limit <= 0 {
		limit = w.cfg.Concurrency
	}
	if !w.slots.take(class, limit, pid) {
		return // every slot of its class is taken: it is looked at when one frees
	}
	actx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	w.running[pid] = cancel
	w.mu.Unlock()
	w.wg.Go(func() {
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
		err := w.attempt(actx, snap, f)
		if moved = errors.Is(err, errMoved); !moved && err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("process attempt", "process", pid, "action", action, "err", err)
		}
	})
}

// attempt claims the process's lease, decides, and acts. p is the
// worker's fold of the process from the stream: every write below is a
// compare-and-set at its head, which fails if the fold is behind and
// brings it up to date (Registry.appendWith), so the decision is made
// again on the log as it stands (errMoved when it no longer holds).
//
// Every write has a deadline of its own (write), never the attempt's: the
// work may have run far past any request timeout, or been stopped by a
// drain, and its outcome must still be written.
func (w *Worker) attempt(ctx context.Context, p *Process, f Facts) error {
	pid := p.ID
	key, err := leases.Key("proc", pid)
	if err != nil {
		return err
	}
	l, err := w.cfg.Leases.Claim(ctx, key, w.cfg.TTL)
	var busy *leases.BusyError
	if errors.As(err, &busy) {
		w.mu.Lock()
		if _, open := w.open[pid]; open {
			w.heldBy[pid] = busy.Holder // a live runner has it: watched
		}
		w.mu.Unlock()
		return nil
	}
	if errors.Is(err, leases.ErrBusy) {
		return nil
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	delete(w.heldBy, pid)
	w.mu.Unlock()
	release := true
	defer func() {
		if release {
			_ = write(ctx, func(ctx context.Context) error { return w.cfg.Leases.Release(ctx, l) })
		}
	}()
	// Claimed: whatever another runner wrote before is on the log now. The
	// decision is made on the worker's fold, without reading the log: every
	// write below is a compare-and-set at the fold's head, and when the log
	// moved (guard) it is made again on the log as it stands, or, when the
	// facts it rested on changed, left to the next look.
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
			return errMoved
		}
		if a, _ := Recover(now, f); a != action || now.Attempts() >= MaxAttempts && action == Execute {
			return errMoved
		}
		decided = now.Head
		return nil
	}
	appendEvent := func(e Event) error {
		return write(ctx, func(ctx context.Context) error {
			_, _, err := w.cfg.Registry.appendWith(ctx, pid, p, func(now *Process) (Event, error) { return e, guard(now) })
			return err
		})
	}
	switch action {
	case Leave, FinishRequested:
		return nil
	case CancelRun:
		return appendEvent(Event{Type: TypeCancelled, Token: l.Token, Data: jsonData(Request{Reason: why})})
	case AbandonDead:
		return appendEvent(Event{Type: TypeAbandoned, Token: l.Token, Data: jsonData(Abandonment{Writer: Sweep, Owner: owner, Evidence: why})})
	case AbandonLapsed:
		return appendEvent(Event{Type: TypeAbandoned, Token: l.Token, Data: jsonData(Abandonment{Writer: ReconciledRequest, Owner: owner, Evidence: why})})
	}
	if p.Attempts() >= MaxAttempts {
		return appendEvent(Event{Type: TypeAbandoned, Token: l.Token, Data: jsonData(Abandonment{Writer: GaveUp, Owner: owner,
			Evidence: fmt.Sprintf("%d attempts began and none ended", p.Attempts())})})
	}
	run, err := w.cfg.Registry.startOn(ctx, p, l, guard)
	if err != nil {
		return err
	}
	if run.Process().CancelRequested != nil {
		// Requested between the claim and the start: the reader may
		// have passed it before this attempt was registered as running.
		w.cancel(pid, errCancelRequested)
	}
	// The lease is kept until the outcome is written, past the end of the
	// attempt's context: a drain or a long run must not let it lapse while
	// the outcome goes out. Its loss stops the attempt.
	kctx, stopKeeping := w.cfg.Leases.Keep(context.WithoutCancel(ctx), l, func(err error) {
		w.cfg.Logger.Warn("renewing a process lease; trying again", "lease", l.Key, "err", err)
	})
	defer stopKeeping()
	defer context.AfterFunc(kctx, func() {
		w.cfg.Logger.Warn("process lease lost; the attempt stops", "lease", l.Key, "err", context.Cause(kctx))
		w.cancel(pid, errLeaseLost)
	})()
	res, err := w.cfg.Executor.Execute(ctx, run)
	cause := context.Cause(ctx)
	if ctx.Err() == nil {
		cause = nil
	}
	// lost notes an owner-bound attempt that ends here with no outcome:
	// recovery then abandons it, as nothing else would while this node
	// lives.
	lost := func() {
		if p.Registration.Disposition == OwnerBound {
			w.mu.Lock()
			w.stopped[pid] = l.Token
			w.mu.Unlock()
		}
	}
	switch {
	case errors.Is(cause, errLeaseLost):
		release = false
		lost()
		return cause
	case errors.Is(cause, errEndedElsewhere):
		return nil
	case err == nil:
		// Done, whatever came meanwhile: the work's outcome stands.
		err = w.settle(ctx, l, func(wctx context.Context) error {
			var err error
			if len(res) > MaxDataBytes {
				_, err = run.Fail(wctx, Failure{Code: "result_too_large", Message: fmt.Sprintf("a result of %d bytes, at most %d", len(res), MaxDataBytes)})
			} else {
				_, err = run.Complete(wctx, res)
			}
			return err
		})
		if err != nil && !errors.Is(err, ErrTerminal) {
			lost()
		}
	case errors.Is(cause, errCancelRequested):
		err = w.settle(ctx, l, func(wctx context.Context) error {
			if err := run.Refresh(wctx); err != nil {
				return err
			}
			reason := "cancel requested"
			if cr := run.Process().CancelRequested; cr != nil {
				reason = cancelReason(cr)
			}
			_, err := run.Cancelled(wctx, reason)
			return err
		})
	case cause != nil:
		// The worker stops: owner-bound work that started is not run
		// again, so its owner says it is abandoned; other work is handed
		// back by releasing the lease.
		if p.Registration.Disposition == OwnerBound {
			err = w.settle(ctx, l, func(wctx context.Context) error { _, err := run.Drained(wctx); return err })
		}
		return err
	case errors.Is(err, ErrRetryable) && run.Attempt() < MaxAttempts:
		w.cfg.Logger.Warn("process attempt failed for now; it runs again", "process", pid, "attempt", run.Attempt(), "err", err)
		return nil // the lease goes back; the next sweep begins the next attempt
	default:
		var xe *ExecError
		if !errors.As(err, &xe) {
			xe = &ExecError{Code: "error", Message: err.Error()}
		}
		err = w.settle(ctx, l, func(wctx context.Context) error {
			_, err := run.Fail(wctx, Failure{Code: xe.Code, Message: xe.Message})
			return err
		})
		if err != nil && !errors.Is(err, ErrTerminal) {
			lost()
		}
	}
	if errors.Is(err, ErrTerminal) {
		return nil // ended by another writer first (an abandon, say)
	}
	return err
}

// writeTimeout bounds one write of the worker (an event, a lease release),
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
// moment while the lease lasts (it is renewed meanwhile): an outcome lost
// to a blip would run the work again, or leave started owner-bound work
// open until its node restarts. When the tries run out, or the lease is
// gone, the next holder of the lease decides.
func (w *Worker) settle(ctx context.Context, l *leases.Lease, fn func(ctx context.Context) error) error {
	var err error
	for try := range settleTries {
		if err = write(ctx, fn); err == nil || permanent(err) || !l.Valid(time.Now()) {
			return err
		}
		w.cfg.Logger.Warn("writing a process's outcome; trying again", "lease", l.Key, "try", try+1, "err", err)
		time.Sleep(min(time.Duration(100<<try)*time.Millisecond, 2*time.Second))
	}
	return err
}

func permanent(err error) bool {
	for _, e := range []error{ErrTerminal, ErrFenced, ErrInvalid, ErrRefused, ErrConflict, ErrCorrupt, ErrUnknown, leases.ErrLost} {
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
