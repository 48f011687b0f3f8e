package processes

import (
	"context"
	"slices"
)

// What a worker does for the registry beside it (ADR 0037): begin the
// processes it registers in their registration, take the others without
// the hop through the stream, and tell its awaiters of ends.

// adopt takes a process its registry just created as if the reader had
// delivered its registration, saving the hop through the stream; the
// reader then passes over what is folded already.
func (w *Worker) adopt(p *Process) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.newRegistration(p)
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

// ticket is a slot a registration about to start its first attempt here
// took (reserve): begin runs the attempt once the registration landed,
// drop gives the slot back if it did not.
type ticket struct {
	w      *Worker
	parent context.Context // Run's
	pid    string
	class  string
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// reserve takes a slot for process id, about to be registered beside the
// worker with its first attempt started by this worker in the same write,
// or returns nil: the worker is not running or not caught up, the id is
// in use, or no slot of its class is free. The process is marked running
// before the registration is written, so no look at it from the stream
// takes it for a stopped attempt of this worker's.
func (w *Worker) reserve(id string, reg Registration) *ticket {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runCtx == nil || w.stopping || !w.caught || w.lapsed {
		return nil
	}
	if _, busy := w.running[id]; busy {
		return nil
	}
	if _, open := w.open[id]; open {
		return nil
	}
	class, limit := w.classOf(&Process{ID: id, Registration: reg})
	if !w.slots.tryTake(class, limit) {
		return nil
	}
	ctx, cancel := context.WithCancelCause(w.runCtx)
	w.running[id] = cancel
	w.wg.Add(1)
	return &ticket{w: w, parent: w.runCtx, pid: id, class: class, ctx: ctx, cancel: cancel}
}

// drop gives back a ticket whose registration did not create its process.
func (t *ticket) drop() {
	t.w.runAttempt(t.parent, t.pid, t.class, t.cancel, "register", func() error { return nil })
}

// begin runs the first attempt of p, registered with its start by this
// worker: the worker keeps p's fold as if its reader had delivered it.
func (t *ticket) begin(p *Process, run *Run) {
	w := t.w
	w.mu.Lock()
	w.newRegistration(p)
	if _, ok := w.open[p.ID]; !ok && p.Head > w.applied {
		w.open[p.ID] = p.clone()
	}
	w.mu.Unlock()
	go w.runAttempt(t.parent, t.pid, t.class, t.cancel, string(Execute), func() error { return w.execute(t.ctx, run) })
}

// watch tells a local awaiter of process pid its end: the channel gets
// the process as folded at its end, from the worker's reader or from the
// attempt that wrote the end here, whichever comes first, or nil when the
// worker can no longer tell (it stops, the log is unreadable): the
// awaiter then follows the stream itself. ok is false when the worker
// does not run; open, that the worker holds the process as not ended, so
// its end is yet to come. stop forgets the awaiter.
func (w *Worker) watch(pid string) (end <-chan *Process, stop func(), ok, open bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runCtx == nil || w.stopping {
		return nil, nil, false, false
	}
	_, open = w.open[pid]
	ch := make(chan *Process, 1)
	if p := w.endedHere[pid]; p != nil {
		ch <- p.clone() // ended here before the awaiter came
		return ch, func() {}, true, true
	}
	if w.waiters == nil {
		w.waiters = map[string][]chan *Process{}
	}
	w.waiters[pid] = append(w.waiters[pid], ch)
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.waiters[pid] = slices.DeleteFunc(w.waiters[pid], func(c chan *Process) bool { return c == ch })
		if len(w.waiters[pid]) == 0 {
			delete(w.waiters, pid)
		}
	}, true, open
}

// tell hands p (a fold at the process's end, or nil) to its awaiters and
// forgets them; w.mu is held.
func (w *Worker) tell(pid string, p *Process) {
	for _, ch := range w.waiters[pid] {
		if p != nil {
			ch <- p.clone()
		} else {
			close(ch)
		}
	}
	delete(w.waiters, pid)
}

// ended tells the local awaiters of the end an attempt here wrote, before
// the reader delivers it.
func (w *Worker) ended(p *Process) {
	if !p.Ended() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if q, open := w.open[p.ID]; open && q.Origin == p.Origin {
		if w.endedHere == nil {
			w.endedHere = map[string]*Process{}
		}
		w.endedHere[p.ID] = p.clone()
	}
	w.tell(p.ID, p)
}

// pruned forgets the ends written here of processes this node pruned:
// a later registration of the same id is another process. (One pruned
// and registered again elsewhere while this reader lags behind the end
// is the window left: its awaiter here is told the earlier end.)
func (w *Worker) pruned(ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.endedHere, id)
	}
}

// newRegistration drops an end written here of an earlier registration
// of p's id; w.mu is held.
func (w *Worker) newRegistration(p *Process) {
	if e := w.endedHere[p.ID]; e != nil && e.Origin != p.Origin {
		delete(w.endedHere, p.ID)
	}
}

// forget drops an open process the reader saw end (or leave); w.mu is
// held.
func (w *Worker) forget(pid string) {
	delete(w.open, pid)
	delete(w.endedHere, pid)
}
