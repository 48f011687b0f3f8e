package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/triggers"
)

// Defaults of a sweep.
const (
	// DefaultRetention keeps ended work a week for operators to look at.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMarkTTL keeps a deletion mark a day for read models behind.
	DefaultMarkTTL = 24 * time.Hour
	// DefaultGrace leaves an object nothing names yet alone for an hour:
	// the record that names it may be on its way.
	DefaultGrace = time.Hour
)

// SweepConfig says what a sweep keeps.
type SweepConfig struct {
	// Retention is how long ended work stays for operators: a committed
	// turn's journal and its calls' steps, an ended process, a trigger
	// occurrence, a receipt, a resolved event. Default DefaultRetention.
	Retention time.Duration
	// MarkTTL is how long a deletion mark (of a session, of a pruned
	// process) stays; a read model that folded less before a sweep removed
	// marks is rebuilt (Watermarks). Default DefaultMarkTTL.
	MarkTTL time.Duration
	// Grace leaves younger objects that nothing names. Default
	// DefaultGrace, or Retention when that is shorter.
	Grace time.Duration
	// DryRun counts what would go and removes nothing.
	DryRun bool
	// Writer names the sweeper in what it writes.
	Writer string
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (cfg SweepConfig) withDefaults() SweepConfig {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MarkTTL <= 0 {
		cfg.MarkTTL = min(DefaultMarkTTL, cfg.Retention)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = min(DefaultGrace, cfg.Retention)
	}
	if cfg.Writer == "" {
		cfg.Writer = "sweep"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// Swept counts what a sweep removed (or, dry, would remove).
type Swept struct {
	Journals    int `json:"journals"`
	Steps       int `json:"steps"`
	Processes   int `json:"processes"`
	Sessions    int `json:"sessions"`
	Occurrences int `json:"occurrences"`
	Deliveries  int `json:"deliveries"`
	Signals     int `json:"signals"`
	Receipts    int `json:"receipts"`
	// Subscriptions are deleted subscriptions' tombstones and histories.
	Subscriptions int `json:"subscriptions"`
	// Agents are deleted agents' revisions.
	Agents      int   `json:"agents"`
	Waits       int   `json:"waits"`
	Resolutions int   `json:"resolutions"`
	Marks       int   `json:"marks"`
	Objects     int   `json:"objects"`
	ObjectBytes int64 `json:"object_bytes"`
}

// sweeper is one sweep's state.
type sweeper struct {
	c     *streams.Client
	cfg   SweepConfig
	now   time.Time
	out   Swept
	logs  map[string]*sessionLog
	store *blobs.Store
}

// Sweep removes what has become garbage (ADR 0035): the journals of turns
// committed more than Retention ago, with their objects and the steps of
// the calls they finished; processes ended more than Retention ago, or
// ended with no session left to tell (their sessions were deleted), and
// the sessions of pruned sub-agents; the trigger records of pruned
// deliveries; indexes of waits whose calls are no longer parked; deletion
// marks older than MarkTTL; objects nothing names. Nothing live is
// touched: an uncommitted turn's journal, a parked call's steps and
// waits, a process not ended.
func Sweep(ctx context.Context, c *streams.Client, cfg SweepConfig) (*Swept, error) {
	cfg = cfg.withDefaults()
	s := &sweeper{c: c, cfg: cfg, now: cfg.Now(), logs: map[string]*sessionLog{},
		store: blobs.New(c, blobs.Limits{Inline: c.Config().InlineBytes, Max: c.Config().MaxPayloadBytes})}
	for _, step := range []struct {
		what string
		fn   func(context.Context) error
	}{
		{"processes", s.processes},
		{"journals", s.journals},
		{"steps", s.steps},
		{"triggers", s.triggers},
		{"agents", s.agents},
		{"waits", s.waits},
		{"marks", s.marks},
		{"objects", s.objects},
	} {
		if err := step.fn(ctx); err != nil {
			return &s.out, fmt.Errorf("lifecycle: sweeping %s: %w", step.what, err)
		}
	}
	return &s.out, nil
}

func (s *sweeper) cutoff() time.Time { return s.now.Add(-s.cfg.Retention) }

// purge removes the messages on filter unless the sweep is dry.
func (s *sweeper) purge(ctx context.Context, filter string) error {
	if s.cfg.DryRun {
		return nil
	}
	return s.c.Purge(ctx, filter)
}

// sessionLog is what the sweep reads of a session's log.
type sessionLog struct {
	exists    bool
	committed map[string]time.Time // turn id -> when its commit was stored
	parked    map[string]bool      // call ids the last commit left suspended
}

// log reads a session's log once per sweep.
func (s *sweeper) log(ctx context.Context, session string) (*sessionLog, error) {
	if l, ok := s.logs[session]; ok {
		return l, nil
	}
	l := &sessionLog{committed: map[string]time.Time{}, parked: map[string]bool{}}
	ev, err := s.c.Subjects().SessionEvents(session)
	if err != nil {
		return nil, err
	}
	var last *sessionlog.Entry
	err = s.c.Read(ctx, ev, 0, func(m *streams.Msg) error {
		l.exists = true
		e, err := sessionlog.DecodeEntry(m.Data)
		if err != nil || e.Kind != sessionlog.KindCommit {
			return nil
		}
		l.committed[e.Turn] = m.Time
		last = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	if last != nil {
		data, err := sessionlog.New(s.c, sessionlog.WithBlobs(s.store.WithMax(4*s.store.Limits().Max))).Body(ctx, session, last)
		if err == nil {
			if b, err := sessionlog.DecodeTurnBody(data); err == nil {
				for _, sc := range b.Outcome.Suspended {
					l.parked[sc.Call.ID] = true
				}
			}
		}
	}
	s.logs[session] = l
	return l, nil
}

// journals drops the journals of turns committed before the cutoff, and
// of sessions without a log (deleted: a run fences before it records).
func (s *sweeper) journals(ctx context.Context) error {
	subj := s.c.Subjects()
	counts, err := s.c.SubjectCounts(ctx, streams.Effects, strings.TrimSuffix(subj.AllEffects(), ">")+"*.*.*.*.r")
	if err != nil {
		return err
	}
	turns := map[[2]string]bool{}
	for sub := range counts {
		session, turn, ok := subj.RecordTurn(sub)
		if ok {
			turns[[2]string{session, turn}] = true
		}
	}
	j := effectlog.New(s.c, effectlog.WithBlobs(s.store))
	for st := range turns {
		l, err := s.log(ctx, st[0])
		if err != nil {
			return err
		}
		at, done := l.committed[st[1]]
		if l.exists && (!done || !at.Before(s.cutoff())) {
			continue
		}
		s.out.Journals++
		if s.cfg.DryRun {
			continue
		}
		records, err := subj.TurnRecords(st[0], st[1])
		if err != nil {
			return err
		}
		all, err := subj.TurnEffects(st[0], st[1])
		if err != nil {
			return err
		}
		n, b, err := j.Drop(ctx, records, all)
		if err != nil {
			return err
		}
		s.out.Objects += n
		s.out.ObjectBytes += b
	}
	return nil
}

// steps removes the durable steps of calls done: older than the cutoff
// and not parked in their session (a parked call runs its steps again
// when it resumes), or of a host process no longer running.
func (s *sweeper) steps(ctx context.Context) error {
	subj := s.c.Subjects()
	counts, err := s.c.SubjectCounts(ctx, streams.Effects, strings.TrimSuffix(subj.AllEffects(), ">")+"*.steps.*.*")
	if err != nil {
		return err
	}
	procs := processes.New(s.c, s.cfg.Writer)
	for sub := range counts {
		scope, call, ok := subj.StepOf(sub)
		if !ok {
			continue
		}
		m, err := s.c.Head(ctx, sub)
		if errors.Is(err, streams.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !m.Time.Before(s.cutoff()) {
			continue
		}
		if scope == HostScope {
			if p, err := procs.Get(ctx, call); err == nil && !p.Ended() {
				continue
			}
		} else {
			l, err := s.log(ctx, scope)
			if err != nil {
				return err
			}
			if l.parked[call] {
				continue
			}
		}
		s.out.Steps++
		if err := s.purge(ctx, sub); err != nil {
			return err
		}
	}
	return nil
}

// HostScope is the scope of the steps of processes no session started.
const HostScope = "_host"

// processes prunes ended processes past the retention, and those no
// session can be told of any more (their sessions were deleted), and
// deletes the sessions of the sub-agents it prunes.
func (s *sweeper) processes(ctx context.Context) error {
	r := processes.New(s.c, s.cfg.Writer)
	garbage := func(p *processes.Process) bool {
		orphan := len(p.Grants) == 0 && (p.Registration.Provenance.Session != "" || p.Registration.WakeTarget != "")
		return p.End.At.Before(s.cutoff()) || orphan
	}
	var pruned []*processes.Process
	if s.cfg.DryRun {
		ps, _, err := r.List(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Ended() && garbage(p) {
				pruned = append(pruned, p)
			}
		}
	} else {
		ps, _, err := r.List(ctx)
		if err != nil {
			return err
		}
		byID := map[string]*processes.Process{}
		for _, p := range ps {
			byID[p.ID] = p
		}
		ids, err := r.PruneWhere(ctx, garbage, s.cutoff())
		if err != nil {
			return err
		}
		for _, id := range ids {
			pruned = append(pruned, byID[id])
		}
	}
	s.out.Processes += len(pruned)
	for _, p := range pruned {
		if p == nil || p.Registration.Input.Kind != processes.SessionTurn {
			continue
		}
		// A sub-agent's session is its process's: it goes with it.
		child := p.Registration.Input.Session
		if s.cfg.DryRun {
			s.out.Sessions++
			continue
		}
		d, err := DeleteSession(ctx, s.c, child, s.cfg.Writer)
		if errors.Is(err, ErrUnknownSession) {
			continue
		}
		if err != nil {
			return fmt.Errorf("deleting the session of sub-agent %s: %w", p.ID, err)
		}
		s.out.Sessions++
		s.out.Objects += d.Objects
		s.out.ObjectBytes += d.ObjectBytes
	}
	return nil
}

// triggers prunes the records of deliveries whose processes are gone.
// agents removes the revisions of agents deleted more than Retention ago.
func (s *sweeper) agents(ctx context.Context) error {
	n, err := agents.New(s.c, s.cfg.Writer).Prune(ctx, s.cutoff(), s.cfg.DryRun)
	if errors.Is(err, streams.ErrStreamMissing) {
		return nil // a stream newer than the deployment's nodes
	}
	s.out.Agents += n
	return err
}

func (s *sweeper) triggers(ctx context.Context) error {
	r := processes.New(s.c, s.cfg.Writer)
	ps, _, err := r.List(ctx)
	if err != nil {
		return err
	}
	registered := map[string]bool{}
	for _, p := range ps {
		registered[p.ID] = true
	}
	if s.cfg.DryRun {
		return nil // counted by a real sweep only: the rules read what the prune before them removed
	}
	pr, err := triggers.New(s.c, s.cfg.Writer).Prune(ctx, s.cutoff(), func(pid string) bool { return registered[pid] })
	s.out.Occurrences += pr.Occurrences
	s.out.Deliveries += pr.Deliveries
	s.out.Signals += pr.Signals
	s.out.Receipts += pr.Receipts
	s.out.Subscriptions += pr.Subscriptions
	return err
}

// waits removes the indexes of signal and event waits whose calls are no
// longer parked, and resolutions no wait took, past the retention.
func (s *sweeper) waits(ctx context.Context) error {
	subj := s.c.Subjects()
	type wait struct{ subject, session, call string }
	var stale []wait
	// Signal waits: <prefix>.timer.wait.<hash>.<session>.<call>.
	err := s.c.Read(ctx, strings.TrimSuffix(subj.AllTimers(), ">")+"wait.>", 0, func(m *streams.Msg) error {
		if !m.Time.Before(s.cutoff()) {
			return nil
		}
		if session, call, err := subj.SignalWaitOf(m.Subject); err == nil {
			stale = append(stale, wait{m.Subject, session, call})
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Event waits: <prefix>.trig.await.<id> -> {"session","call"}.
	awaited := map[string]bool{}
	err = s.c.Read(ctx, subj.AllTriggers("await"), 0, func(m *streams.Msg) error {
		awaited[m.Subject] = true
		if !m.Time.Before(s.cutoff()) {
			return nil
		}
		var w struct{ Session, Call string }
		if json.Unmarshal(m.Data, &w) == nil {
			stale = append(stale, wait{m.Subject, w.Session, w.Call})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, w := range stale {
		l, err := s.log(ctx, w.session)
		if err != nil {
			return err
		}
		if l.exists && l.parked[w.call] {
			continue
		}
		s.out.Waits++
		if err := s.purge(ctx, w.subject); err != nil {
			return err
		}
	}
	// Resolutions no wait indexes, past the retention, with their signal.
	var resolved []string
	err = s.c.Read(ctx, subj.AllTriggers("res"), 0, func(m *streams.Msg) error {
		if m.Time.Before(s.cutoff()) {
			resolved = append(resolved, m.Subject)
		}
		return nil
	})
	if err != nil {
		return err
	}
	prefix := strings.TrimSuffix(subj.AllTriggers("res"), "*")
	for _, res := range resolved {
		id := strings.TrimPrefix(res, prefix)
		if awaited[strings.TrimSuffix(subj.AllTriggers("await"), "*")+id] {
			continue
		}
		s.out.Resolutions++
		if err := s.purge(ctx, res); err != nil {
			return err
		}
		if e, err := streams.ParseToken(id); err == nil {
			if sig, err := subj.EventSignal(e); err == nil {
				if err := s.purge(ctx, sig); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// marks removes deletion marks older than MarkTTL and raises the
// watermarks below which a read model must be rebuilt.
func (s *sweeper) marks(ctx context.Context) error {
	subj := s.c.Subjects()
	for _, m := range []struct {
		stream streams.Stream
		filter string
	}{
		{streams.Sessions, subj.AllSessionMarks()},
		{streams.Processes, subj.AllProcessMarks()},
	} {
		var old []*streams.Msg
		err := s.c.Read(ctx, m.filter, 0, func(msg *streams.Msg) error {
			if msg.Time.Before(s.now.Add(-s.cfg.MarkTTL)) {
				old = append(old, msg)
			}
			return nil
		})
		if err != nil {
			return err
		}
		var through uint64
		for _, msg := range old {
			s.out.Marks++
			through = max(through, msg.Seq)
			if err := s.purge(ctx, msg.Subject); err != nil {
				return err
			}
		}
		if through > 0 && !s.cfg.DryRun {
			if err := RaiseWatermark(ctx, s.c, m.stream, through); err != nil {
				return err
			}
		}
	}
	return nil
}

// objects deletes the objects no record names, once older than Grace: a
// journal record's whose turn's journal is gone, a body's whose session's
// log is gone, a snapshot's that is not its session's snapshot.
func (s *sweeper) objects(ctx context.Context) error {
	type object struct {
		name  string
		owner blobs.Owner
		size  int64
	}
	var garbage []object
	subj := s.c.Subjects()
	seen := map[blobs.Owner]bool{} // owners known to be live
	err := s.c.Objects(ctx, func(o streams.ObjectInfo) error {
		owner, ok := blobs.OwnerOf(o.Metadata)
		if !ok || !o.Modified.Before(s.now.Add(-s.cfg.Grace)) {
			return nil
		}
		garbage = append(garbage, object{o.Name, owner, o.Size})
		return nil
	})
	if err != nil {
		return err
	}
	for _, o := range garbage {
		live, err := s.owned(ctx, subj, o.owner, o.name, seen)
		if err != nil {
			return err
		}
		if live {
			continue
		}
		s.out.Objects++
		s.out.ObjectBytes += o.size
		if s.cfg.DryRun {
			continue
		}
		if _, err := s.c.DeleteObject(ctx, o.name); err != nil {
			return err
		}
	}
	return nil
}

// owned reports whether the owner of the object named name still names
// it.
func (s *sweeper) owned(ctx context.Context, subj streams.Subjects, o blobs.Owner, name string, seen map[blobs.Owner]bool) (bool, error) {
	switch o.Kind {
	case blobs.KindRecord:
		if seen[o] {
			return true, nil
		}
		records, err := subj.TurnRecords(o.Session, o.Turn)
		if err != nil {
			return false, nil // no valid owner: nothing can name it
		}
		_, err = s.c.NextOnSubject(ctx, records, 1)
		if errors.Is(err, streams.ErrNotFound) {
			return false, nil
		}
		seen[o] = err == nil
		return err == nil, err
	case blobs.KindBody:
		l, err := s.log(ctx, o.Session)
		return err == nil && l.exists, err
	case blobs.KindProgram:
		return true, nil // an operator's: kept until deleted
	case blobs.KindSnapshot:
		ref, ok, err := sessionlog.SnapshotRef(ctx, s.c, o.Session)
		if err != nil {
			return false, err
		}
		return ok && o.Name(ref.Sum) == name, nil
	}
	return true, nil // a kind this version does not know: left alone
}
