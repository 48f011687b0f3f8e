package processes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
	"github.com/oklog/ulid/v2"
)

// Store is what the registry needs from the stream layer.
type Store interface {
	Subjects() streams.Subjects
	Append(ctx context.Context, p streams.Publication, expect uint64) (seq uint64, duplicate bool, err error)
	Head(ctx context.Context, subject string) (*streams.Msg, error)
	NextOnSubjects(ctx context.Context, subjects []string, seq uint64) (*streams.Msg, error)
	Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error
	Tail(ctx context.Context, s streams.Stream, filters []string, from uint64, fn func(m *streams.Msg, pending uint64) error) error
	Purge(ctx context.Context, filter string) error
	Publish(ctx context.Context, p streams.Publication) (seq uint64, duplicate bool, err error)
	// Verify vouches for a record (streams.Client.Verify).
	Verify(m *streams.Msg) error
}

// appendTries bounds how often one append re-reads and tries again after
// other writers moved the log: each try follows a write that landed, so
// only a process under constant writes by others can run out.
const appendTries = 32

// Registry writes and reads process records and events. Every write is a
// compare-and-set on the process's subject at the head the writer read,
// so the log is dense and ordered and rules checked on a state hold for
// the state the event lands on.
type Registry struct {
	s      Store
	writer string
	now    func() time.Time
	// worker, while one runs beside the registry (Worker.Run), begins
	// the processes this registry creates that it can run at once, and is
	// handed the others, so it need not wait for its follower to deliver
	// them.
	worker atomic.Pointer[Worker]
}

// New returns a registry whose writes name writer (a node id, or an
// operator) as their author.
func New(s Store, writer string) *Registry {
	return &Registry{s: s, writer: writer, now: time.Now}
}

func (r *Registry) subject(id string) (string, error) {
	subj, err := r.s.Subjects().ProcessEvents(id)
	if err != nil {
		return "", fmt.Errorf("%w: process id: %v", ErrInvalid, err)
	}
	return subj, nil
}

// Register records a process under id, unless it is there: the same
// registration again returns the process as it stands with created
// false; another registration under the same id is ErrConflict.
//
// Beside a running Worker with a slot free for it, the registration also
// starts the process's first attempt, run by that worker, in the same
// write (ADR 0037).
func (r *Registry) Register(ctx context.Context, id string, reg Registration) (p *Process, created bool, err error) {
	w := r.worker.Load()
	if w == nil || reg.Disposition == ExternallyOwned {
		return r.register(ctx, id, reg, nil)
	}
	t := w.reserve(id, reg)
	if t == nil {
		return r.register(ctx, id, reg, nil)
	}
	st := Start{Owner: OwnerOf(w.cfg.Leases.Owner()), Attempt: 1, Token: 1}
	p, created, err = r.register(ctx, id, reg, &st)
	if err != nil || !created {
		t.drop()
		return p, created, err
	}
	t.begin(p, &Run{r: r, p: p.clone(), start: st})
	return p, true, nil
}

// RegisterStarted is Register with the first attempt begun by runner in
// the same write, for a runner that does the work itself; run is nil when
// the process was registered already (created false).
func (r *Registry) RegisterStarted(ctx context.Context, id string, reg Registration, runner leases.Owner) (p *Process, run *Run, created bool, err error) {
	if reg.Disposition == ExternallyOwned {
		return nil, nil, false, fmt.Errorf("%w: externally owned work is never run by lash", ErrRefused)
	}
	st := Start{Owner: OwnerOf(runner), Attempt: 1, Token: 1}
	if p, created, err = r.register(ctx, id, reg, &st); err != nil || !created {
		return p, nil, created, err
	}
	return p, &Run{r: r, p: p.clone(), start: st}, true, nil
}

// register writes the registration, with start, if not nil, as its
// first attempt.
func (r *Registry) register(ctx context.Context, id string, reg Registration, start *Start) (p *Process, created bool, err error) {
	subj, err := r.subject(id)
	if err != nil {
		return nil, false, err
	}
	if err := reg.Validate(); err != nil {
		return nil, false, fmt.Errorf("process %s: %w", clip(id), err)
	}
	reg, err = reg.canonical()
	if err != nil {
		return nil, false, err
	}
	hash, err := reg.Hash()
	if err != nil {
		return nil, false, err
	}
	data, err := json.Marshal(reg)
	if err != nil {
		return nil, false, err
	}
	e := Event{V: Version, N: 1, Type: TypeRegistered, By: r.writer, At: r.now().UTC(), Data: data, Hash: hash, Start: start}
	if start != nil {
		e.Token = start.Token
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, false, err
	}
	// The compare-and-set at 0 and the hash make registration idempotent;
	// the msg id only lets this call's own retry after a lost ack land as
	// a duplicate, so it is fresh each call: a process registered again
	// after its id was pruned must not be taken for the earlier one. A
	// duplicate is then this call's own write.
	seq, _, err := r.s.Append(ctx, streams.Publication{Subject: subj, Data: body, MsgID: "proc:" + subj + ":1:" + ulid.Make().String()}, 0)
	created = err == nil
	if err != nil && !errors.Is(err, streams.ErrConflict) {
		return nil, false, fmt.Errorf("process %s: register: %w", clip(id), err)
	}
	if created {
		// The log is this one event: folded here, not read back.
		stored, err := Decode(body, seq)
		if err != nil {
			return nil, false, err
		}
		if p, err = fold(id, []Event{stored}); err != nil {
			return nil, false, err
		}
		if w := r.worker.Load(); w != nil && start == nil {
			w.adopt(p.clone())
		}
		return p, true, nil
	}
	p, err = r.Get(ctx, id)
	if err != nil {
		return nil, false, err
	}
	if p.Hash != hash {
		return nil, false, fmt.Errorf("%w: process %s is registered with other content (hash %.12s, this registration %.12s)", ErrConflict, clip(id), p.Hash, hash)
	}
	return p, created, nil
}

// Get folds the process's whole log.
func (r *Registry) Get(ctx context.Context, id string) (*Process, error) {
	evs, err := r.Events(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	return fold(id, evs)
}

// Events returns the process's events numbered above after, in order.
func (r *Registry) Events(ctx context.Context, id string, after uint64) ([]Event, error) {
	subj, err := r.subject(id)
	if err != nil {
		return nil, err
	}
	var evs []Event
	err = r.s.Read(ctx, subj, 1, func(m *streams.Msg) error {
		e, signed, err := signedEvent(r.s, m)
		if err != nil {
			return fmt.Errorf("process %s: %w", clip(id), err)
		}
		if signed && e.N > after {
			evs = append(evs, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 && after == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknown, clip(id))
	}
	return evs, nil
}

// List folds every process on the stream, in the order they were
// registered. A process whose log cannot be folded is left out and named
// in unreadable. It reads the whole stream: for operators and tests, not
// for hot paths.
func (r *Registry) List(ctx context.Context) (ps []*Process, unreadable map[string]error, err error) {
	byID := map[string]*Process{}
	unreadable = map[string]error{}
	subj := r.s.Subjects()
	err = r.s.Read(ctx, subj.AllProcessEvents(), 1, func(m *streams.Msg) error {
		id, err := subj.ProcessOf(m.Subject)
		if err != nil {
			return nil // not a canonical process subject: nothing is derived from it
		}
		if _, bad := unreadable[id]; bad {
			return nil
		}
		e, signed, err := signedEvent(r.s, m)
		if !signed {
			return nil
		}
		p := byID[id]
		if err == nil && p == nil {
			p = &Process{ID: id}
			byID[id] = p
			ps = append(ps, p)
		}
		if err == nil {
			err = p.apply(e)
		}
		if err != nil {
			unreadable[id] = err
			delete(byID, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	out := ps[:0]
	for _, p := range ps {
		if byID[p.ID] == p {
			out = append(out, p)
		}
	}
	return out, unreadable, nil
}

// Prune removes the logs of processes that ended before cutoff, and
// returns their ids, then the budget records of trees of sub-agents none
// of whose processes is left (pruneTrees). A process that has not ended is
// never touched; an unreadable log is left for an operator. Each log goes
// in one purge of its subject, so a prune stopped half way leaves whole
// processes; a mark on <prefix>.proc.<pid>.gone, written before, tells
// read models to drop it.
func (r *Registry) Prune(ctx context.Context, cutoff time.Time) ([]string, error) {
	return r.PruneWhere(ctx, func(p *Process) bool { return p.End.At.Before(cutoff) }, cutoff)
}

// PruneWhere is Prune of the ended processes garbage says are, with tree
// records whose last place was taken before treeCutoff.
func (r *Registry) PruneWhere(ctx context.Context, garbage func(p *Process) bool, treeCutoff time.Time) ([]string, error) {
	ps, _, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var pruned []string
	for _, p := range ps {
		if !p.Ended() || !garbage(p) {
			continue
		}
		subj, err := r.subject(p.ID)
		if err != nil {
			return pruned, err
		}
		// The list may come from a replica that has yet to apply an earlier
		// prune's purge: the leader says whether the process is still there.
		if _, err := r.s.NextOnSubjects(ctx, []string{subj}, 1); errors.Is(err, streams.ErrNotFound) {
			continue
		} else if err != nil {
			return pruned, err
		}
		// The mark first: read models drop the process on it, and a fresh
		// fold does too, whether the purge after it happens now or at the
		// next prune. Its msg id names this registration, so a later one
		// under the same id gets a mark of its own.
		gone, err := r.s.Subjects().ProcessGone(p.ID)
		if err != nil {
			return pruned, err
		}
		mark := jsonData(struct {
			Pruned time.Time `json:"pruned"`
			Ended  time.Time `json:"ended"`
			Hash   string    `json:"hash"`
		}{r.now().UTC(), p.End.At, p.Hash})
		if _, _, err := r.s.Publish(ctx, streams.Publication{Subject: gone, Data: mark, MsgID: fmt.Sprintf("proc-gone:%s:%d", gone, p.Origin)}); err != nil {
			return pruned, fmt.Errorf("process %s: prune mark: %w", clip(p.ID), err)
		}
		if err := r.s.Purge(ctx, subj); err != nil {
			return pruned, fmt.Errorf("process %s: prune: %w", clip(p.ID), err)
		}
		pruned = append(pruned, p.ID)
	}
	if w := r.worker.Load(); w != nil {
		w.pruned(pruned)
	}
	registered := map[string]bool{}
	for _, p := range ps {
		registered[p.ID] = true
	}
	for _, id := range pruned {
		delete(registered, id)
	}
	return pruned, r.pruneTrees(ctx, registered, treeCutoff)
}

// catchUp applies to p the events stored after its head.
func (r *Registry) catchUp(ctx context.Context, p *Process) error {
	subj, err := r.subject(p.ID)
	if err != nil {
		return err
	}
	return r.s.Read(ctx, subj, p.Head+1, func(m *streams.Msg) error {
		e, signed, err := signedEvent(r.s, m)
		if err != nil {
			return fmt.Errorf("process %s: %w", clip(p.ID), err)
		}
		if !signed {
			p.passOver(m.Seq)
			return nil
		}
		return p.apply(e)
	})
}

// Append appends e to the process's log if its rules allow it on the log
// as it stands (see the package doc). A keyed event already there with
// the same content is not appended again: Append returns the stored one
// and duplicate. p, if not nil, is the caller's fold of the process,
// brought up to date in place.
func (r *Registry) Append(ctx context.Context, id string, e Event, p *Process) (stored *Event, duplicate bool, err error) {
	return r.appendWith(ctx, id, p, func(*Process) (Event, error) { return e, nil })
}

// appendWith appends the event build makes from the process as it stands,
// calling build again each time other writers moved the log first.
func (r *Registry) appendWith(ctx context.Context, id string, p *Process, build func(p *Process) (Event, error)) (*Event, bool, error) {
	subj, err := r.subject(id)
	if err != nil {
		return nil, false, err
	}
	if p == nil {
		if p, err = r.Get(ctx, id); err != nil {
			return nil, false, err
		}
	} else if p.ID != id {
		return nil, false, fmt.Errorf("%w: a fold of process %s given for %s", ErrInvalid, clip(p.ID), clip(id))
	}
	for range appendTries {
		e, err := build(p)
		if err != nil {
			return nil, false, err
		}
		e.V, e.By, e.Hash = Version, r.writer, ""
		dup, err := p.check(&e)
		if err != nil {
			return nil, false, err
		}
		if dup {
			return r.keyed(ctx, id, e.Key)
		}
		e.At = r.now().UTC()
		body, err := json.Marshal(e)
		if err != nil {
			return nil, false, err
		}
		// The registration's sequence in the id keeps a write apart from
		// one at the same place of an earlier, pruned process of the id.
		msgID := fmt.Sprintf("proc:%s:%d:%d:%.16s", subj, p.Origin, e.N, e.content())
		seq, _, err := r.s.Append(ctx, streams.Publication{Subject: subj, Data: body, MsgID: msgID}, p.Head)
		if err == nil {
			e.Seq = seq
			if err := p.apply(e); err != nil {
				return nil, false, err
			}
			return &e, false, nil
		}
		if !errors.Is(err, streams.ErrConflict) {
			return nil, false, fmt.Errorf("process %s: append %s: %w", clip(id), e.Type, err)
		}
		if err := r.catchUp(ctx, p); err != nil {
			return nil, false, err
		}
	}
	return nil, false, fmt.Errorf("process %s: append: the log kept moving under %d tries", clip(id), appendTries)
}

// signedEvent decodes the event in m. A message the deployment did not sign
// (ADR 0036) is no one's event: signed is false, and folds pass it over (a
// compare-and-set still lands after it).
func signedEvent(s Store, m *streams.Msg) (e Event, signed bool, err error) {
	if s.Verify(m) != nil {
		return Event{}, false, nil
	}
	e, err = Decode(m.Data, m.Seq)
	return e, true, err
}

// keyed returns the stored event with key.
func (r *Registry) keyed(ctx context.Context, id, key string) (*Event, bool, error) {
	evs, err := r.Events(ctx, id, 0)
	if err != nil {
		return nil, false, err
	}
	for i := range evs {
		if evs[i].Key == key {
			return &evs[i], true, nil
		}
	}
	return nil, false, fmt.Errorf("%w: process %s: key %q vanished from its log", ErrCorrupt, clip(id), clip(key))
}

func jsonData(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("processes: encoding %T: %v", v, err)) // only our own types
	}
	return b
}

// RequestCancel asks the process's runner to stop. A second request is a
// no-op returning the first.
func (r *Registry) RequestCancel(ctx context.Context, id, reason string) (*Event, error) {
	if len(reason) > MaxTextBytes {
		return nil, fmt.Errorf("%w: reason of %d bytes, at most %d", ErrInvalid, len(reason), MaxTextBytes)
	}
	p, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.CancelRequested != nil {
		return p.CancelRequested, nil
	}
	e, _, err := r.Append(ctx, id, Event{Type: TypeCancelRequested, Data: jsonData(Request{Reason: reason})}, p)
	if errors.Is(err, ErrConflict) && p.CancelRequested != nil {
		return p.CancelRequested, nil // a request with another reason won
	}
	return e, err
}

// RequestAbandon records an operator's request that a process whose
// runner is gone be marked abandoned. Recovery honours it once no runner
// runs the work (never started, its runner proved dead, or its runner's
// own node says it stopped); the request alone ends nothing.
func (r *Registry) RequestAbandon(ctx context.Context, id, reason string) (*Event, error) {
	if len(reason) > MaxTextBytes {
		return nil, fmt.Errorf("%w: reason of %d bytes, at most %d", ErrInvalid, len(reason), MaxTextBytes)
	}
	p, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.AbandonRequested != nil {
		return p.AbandonRequested, nil
	}
	e, _, err := r.Append(ctx, id, Event{Type: TypeAbandonRequested, Data: jsonData(Request{Reason: reason})}, p)
	if errors.Is(err, ErrConflict) && p.AbandonRequested != nil {
		return p.AbandonRequested, nil
	}
	return e, err
}

// Grant lets session address the process; from, if not empty, is the
// session whose grant is transferred. A grant held already is not written
// again. Grants may change after the process ended.
func (r *Registry) Grant(ctx context.Context, id, session, from string) (*Process, error) {
	p, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	_, _, err = r.appendWith(ctx, id, p, func(p *Process) (Event, error) {
		if p.Granted(session) && (from == "" || !p.Granted(from)) {
			return Event{}, errUnchanged
		}
		return Event{Type: TypeGranted, Data: jsonData(Grant{Session: session, From: from})}, nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return p, err
}

// Revoke ends session's grant on the process, and so its wakes; the
// process itself goes on. A grant not held is not revoked again.
func (r *Registry) Revoke(ctx context.Context, id, session string) (*Process, error) {
	p, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	_, _, err = r.appendWith(ctx, id, p, func(p *Process) (Event, error) {
		if !p.Granted(session) {
			return Event{}, errUnchanged
		}
		return Event{Type: TypeRevoked, Data: jsonData(Grant{Session: session})}, nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return p, err
}

var errUnchanged = errors.New("unchanged")

// Finish writes the terminal event of work lash does not run: the owner
// of externally owned work reports its outcome (ByExternalOwner), or
// recovery abandons it on a request (ByReconciledRequest).
func (r *Registry) Finish(ctx context.Context, id string, typ string, data any, by Authority) (*Event, bool, error) {
	if !Terminal(typ) || by == ByRunner {
		return nil, false, fmt.Errorf("%w: Finish writes a terminal event with an authority", ErrInvalid)
	}
	return r.Append(ctx, id, Event{Type: typ, Authority: by, Data: jsonData(data)}, nil)
}
