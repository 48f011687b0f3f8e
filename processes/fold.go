package processes

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/lash-run/lash/streams"
)

// Status is where a process stands.
type Status string

const (
	Pending   Status = "pending" // registered, never started
	Running   Status = "running"
	Waiting   Status = "waiting"
	Completed Status = "completed"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
	Abandoned Status = "abandoned"
)

// Process is a process as its log says, folded event by event.
type Process struct {
	ID           string
	Registration Registration
	Hash         string
	Registered   time.Time
	// Origin is the stream sequence of the registration: it tells this
	// process from an earlier one of the same id that was pruned.
	Origin uint64
	// Events is the number of the last event; Head its stream sequence,
	// which the next append expects.
	Events uint64
	Head   uint64
	// FirstStart is the first attempt's start ("started" is for ever);
	// LastStart the newest, whose runner alone may report an outcome.
	FirstStart *Start
	LastStart  *Start
	StartedAt  time.Time
	// Released: the newest attempt's runner handed it back unfinished;
	// nobody runs it until the next attempt starts.
	Released bool
	// Token is the newest fencing token on the log: writes with an older
	// one are fenced.
	Token            uint64
	Waiting          bool
	CancelRequested  *Event
	AbandonRequested *Event
	// End is the terminal event, once there is one.
	End *Event
	// Grants are the sessions that may address the process (await it,
	// cancel it, be woken by its end): the one that started it and its
	// wake target, then as granted, transferred and revoked.
	Grants []string

	keys map[string]string // idempotency key -> content hash
}

// clone is a copy of p that later applies to p do not change.
func (p *Process) clone() *Process {
	c := *p
	if p.keys != nil {
		c.keys = make(map[string]string, len(p.keys))
		for k, v := range p.keys {
			c.keys[k] = v
		}
	}
	return &c
}

// Status is the process's status.
func (p *Process) Status() Status {
	switch {
	case p.End != nil:
		return Status(p.End.Type)
	case p.Waiting:
		return Waiting
	case p.InAttempt():
		return Running
	}
	return Pending
}

// InAttempt reports whether an attempt started that has neither ended nor
// been handed back: its runner, while it lives, runs the process.
func (p *Process) InAttempt() bool { return p.LastStart != nil && !p.Released && p.End == nil }

// Granted reports whether session may address the process.
func (p *Process) Granted(session string) bool { return slices.Contains(p.Grants, session) }

// WakesTarget is the session told of the process's end: its wake target,
// while that session holds a grant.
func (p *Process) WakesTarget() string {
	if t := p.Registration.WakeTarget; t != "" && p.Granted(t) {
		return t
	}
	return ""
}

// Ended reports whether the process has its terminal event.
func (p *Process) Ended() bool { return p.End != nil }

// Started reports whether any attempt ever started.
func (p *Process) Started() bool { return p.FirstStart != nil }

// Attempts is how many attempts started.
func (p *Process) Attempts() int {
	if p.LastStart == nil {
		return 0
	}
	return p.LastStart.Attempt
}

// Declared reports whether events of type typ may be appended.
func (p *Process) Declared(typ string) bool {
	if builtin[typ] {
		return true
	}
	for _, t := range p.Registration.EventTypes {
		if t == typ {
			return true
		}
	}
	return false
}

// fold builds a process from its events, in order.
func fold(id string, evs []Event) (*Process, error) {
	p := &Process{ID: id}
	for _, e := range evs {
		if err := p.apply(e); err != nil {
			return nil, err
		}
	}
	if p.Events == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknown, id)
	}
	return p, nil
}

// Apply folds the next stored event into p, for read models that keep a
// process between its events; p starts as &Process{ID: id}. It refuses,
// with ErrCorrupt, a log no writer following the rules could have made.
func (p *Process) Apply(e Event) error { return p.apply(e) }

// apply adds a stored event. Writers check events before they append
// them; apply only refuses a log that cannot have been written that way.
// passOver moves the fold's head past a message that is no one's event.
func (p *Process) passOver(seq uint64) { p.Head = max(p.Head, seq) }

func (p *Process) apply(e Event) error {
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: process %s, event %d: %s", ErrCorrupt, p.ID, e.N, fmt.Sprintf(format, a...))
	}
	if e.N != p.Events+1 {
		return corrupt("numbered %d after event %d", e.N, p.Events)
	}
	if (e.N == 1) != (e.Type == TypeRegistered) {
		return corrupt("the registration is the first event and only the first (type %q)", e.Type)
	}
	if e.Start != nil && e.Type != TypeRegistered {
		return corrupt("a %s event carries a start", e.Type)
	}
	if k := keyOf(e.Type); e.Key != k && (k != "" || reserved(e.Key)) {
		return corrupt("a %s event with key %q", e.Type, clip(e.Key))
	}
	switch e.Type {
	case TypeRegistered:
		if err := json.Unmarshal(e.Data, &p.Registration); err != nil {
			return corrupt("registration: %v", err)
		}
		p.Hash, p.Registered, p.Origin = e.Hash, e.At, e.Seq
		if st := e.Start; st != nil {
			if p.Registration.Disposition == ExternallyOwned || st.Attempt != 1 || st.Token == 0 || st.Token != e.Token {
				return corrupt("a registration that starts attempt %d under token %d (event token %d) of %s work", st.Attempt, st.Token, e.Token, p.Registration.Disposition)
			}
			p.FirstStart, p.LastStart, p.StartedAt = st, st, e.At
		}
		for _, s := range []string{p.Registration.Provenance.Session, p.Registration.WakeTarget} {
			if s != "" && !p.Granted(s) {
				p.Grants = append(p.Grants, s)
			}
		}
	case TypeStarted:
		var s Start
		if err := json.Unmarshal(e.Data, &s); err != nil {
			return corrupt("start: %v", err)
		}
		if p.FirstStart == nil {
			p.FirstStart, p.StartedAt = &s, e.At
		}
		p.LastStart, p.Waiting, p.Released = &s, false, false
	case TypeReleased:
		p.Released, p.Waiting = true, false
	case TypeWaiting:
		p.Waiting = true
	case TypeResumed:
		p.Waiting = false
	case TypeCancelRequested:
		p.CancelRequested = &e
	case TypeAbandonRequested:
		p.AbandonRequested = &e
	case TypeGranted, TypeRevoked:
		var g Grant
		if err := json.Unmarshal(e.Data, &g); err != nil || g.Session == "" {
			return corrupt("grant: %v", err)
		}
		drop := g.From
		if e.Type == TypeRevoked {
			drop = g.Session
		}
		p.Grants = slices.DeleteFunc(slices.Clone(p.Grants), func(s string) bool { return s == drop })
		if e.Type == TypeGranted && !p.Granted(g.Session) {
			p.Grants = append(p.Grants, g.Session)
		}
	}
	if Terminal(e.Type) {
		if p.End != nil {
			return corrupt("a second terminal event (%s after %s)", e.Type, p.End.Type)
		}
		p.End, p.Waiting = &e, false
	}
	if e.Key != "" {
		if p.keys == nil {
			p.keys = map[string]string{}
		}
		p.keys[e.Key] = e.content()
	}
	p.Token = max(p.Token, e.Token)
	p.Events, p.Head = e.N, e.Seq
	return nil
}

// keyOf is the key an event of type typ must carry, or "" if the caller
// chooses.
func keyOf(typ string) string {
	switch {
	case Terminal(typ):
		return KeyTerminal
	case typ == TypeCancelRequested:
		return KeyCancel
	case typ == TypeAbandonRequested:
		return KeyAbandon
	}
	return ""
}

func reserved(key string) bool { return key == KeyTerminal || key == KeyCancel || key == KeyAbandon }

// check decides whether e may be appended to p as it stands: nil, or
// duplicate when an event with e's key and content is there already (the
// append is then a no-op), or the reason it is refused. check fills in
// e's number and key.
func (p *Process) check(e *Event) (duplicate bool, err error) {
	refuse := func(sentinel error, format string, a ...any) (bool, error) {
		return false, fmt.Errorf("%w: process %s: %s", sentinel, p.ID, fmt.Sprintf(format, a...))
	}
	if e.Type == TypeRegistered || e.Start != nil {
		return refuse(ErrInvalid, "a registration, and a start in one, is written by Register only")
	}
	if err := checkType(e.Type); err != nil {
		return refuse(ErrInvalid, "%v", err)
	}
	if !p.Declared(e.Type) {
		return refuse(ErrInvalid, "event type %q is not declared by its registration", e.Type)
	}
	if len(e.Data) > MaxDataBytes {
		return refuse(ErrInvalid, "event data of %d bytes, at most %d", len(e.Data), MaxDataBytes)
	}
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return refuse(ErrInvalid, "event data is not JSON")
	}
	if k := keyOf(e.Type); k != "" {
		e.Key = k
	} else if reserved(e.Key) {
		return refuse(ErrInvalid, "key %q is reserved", e.Key)
	}
	if len(e.Key) > MaxKeyBytes {
		return refuse(ErrInvalid, "key of %d bytes, at most %d", len(e.Key), MaxKeyBytes)
	}
	if e.Key != "" {
		if have, ok := p.keys[e.Key]; ok {
			if have == e.content() {
				return true, nil
			}
			if e.Key == KeyTerminal {
				return refuse(ErrTerminal, "it ended %s; a different terminal is refused", p.End.Type)
			}
			return refuse(ErrConflict, "an event with key %q and other content is there already", clip(e.Key))
		}
	}
	if p.End != nil && e.Type != TypeGranted && e.Type != TypeRevoked {
		return refuse(ErrTerminal, "it ended %s", p.End.Type)
	}
	if p.Events >= MaxEvents && !Terminal(e.Type) && e.Type != TypeCancelRequested && e.Type != TypeStarted && e.Type != TypeReleased {
		return refuse(ErrRefused, "it has %d events, the most a process may have; only its end, an attempt, its release or a cancel request is taken", p.Events)
	}
	if err := p.checkWriter(e); err != nil {
		return false, err
	}
	e.N = p.Events + 1
	return false, nil
}

// checkWriter applies the authority rules: who may write e.
func (p *Process) checkWriter(e *Event) error {
	refuse := func(sentinel error, format string, a ...any) error {
		return fmt.Errorf("%w: process %s: %s", sentinel, p.ID, fmt.Sprintf(format, a...))
	}
	disp := p.Registration.Disposition
	if e.Token != 0 && e.Token < p.Token {
		return refuse(ErrFenced, "token %d, the log holds %d", e.Token, p.Token)
	}
	if e.Token != 0 && e.Authority != ByRunner {
		return refuse(ErrInvalid, "an event carries a token or an authority, not both")
	}
	switch e.Type {
	case TypeStarted:
		var s Start
		if err := json.Unmarshal(e.Data, &s); err != nil {
			return refuse(ErrInvalid, "start data: %v", err)
		}
		switch {
		case e.Token == 0 || s.Token != e.Token:
			return refuse(ErrInvalid, "a start carries a token and names it")
		case disp == ExternallyOwned:
			return refuse(ErrRefused, "externally owned work is never run by lash")
		case disp == OwnerBound && p.FirstStart != nil:
			return refuse(ErrRefused, "owner-bound work started once (attempt 1 by %s) and is never run again", p.FirstStart.Owner.Node)
		case e.Token == p.Token:
			return refuse(ErrFenced, "token %d is taken already; a start takes a newer one", e.Token)
		case s.Attempt != p.Attempts()+1:
			return refuse(ErrInvalid, "attempt %d after %d", s.Attempt, p.Attempts())
		}
		return nil
	case TypeReleased:
		switch {
		case p.LastStart == nil || e.Token == 0 || p.LastStart.Token != e.Token:
			return refuse(ErrFenced, "only the runner of the newest attempt hands it back")
		case p.Released:
			return refuse(ErrRefused, "attempt %d was handed back already", p.LastStart.Attempt)
		case disp == OwnerBound:
			return refuse(ErrRefused, "owner-bound work is never run again: its runner abandons it instead")
		}
		return nil
	case TypeCancelRequested, TypeAbandonRequested:
		return nil // anyone the deployment lets write; keyed, so once
	case TypeGranted, TypeRevoked:
		var g Grant
		if err := json.Unmarshal(e.Data, &g); err != nil {
			return refuse(ErrInvalid, "grant data: %v", err)
		}
		if err := streams.CheckID(g.Session); err != nil {
			return refuse(ErrInvalid, "a grant's session: %v", err)
		}
		switch {
		case e.Type == TypeRevoked && g.From != "":
			return refuse(ErrInvalid, "a revoke names one session")
		case g.From != "" && !p.Granted(g.From):
			return refuse(ErrRefused, "session %s holds no grant to transfer", clip(g.From))
		case e.Type == TypeGranted && g.From == "" && len(p.Grants) >= MaxGrants:
			return refuse(ErrRefused, "%d sessions hold grants, the most a process may have", len(p.Grants))
		}
		return nil
	case TypeCompleted, TypeFailed:
		if e.Token != 0 {
			if p.LastStart == nil || p.LastStart.Token != e.Token || p.Released {
				return refuse(ErrFenced, "only the runner of the newest attempt, not handed back, reports its outcome")
			}
			return nil
		}
	case TypeCancelled:
		if e.Token != 0 {
			return nil // the newest holder, run or not
		}
	case TypeAbandoned:
		var a Abandonment
		if err := json.Unmarshal(e.Data, &a); err != nil || a.Evidence == "" {
			return refuse(ErrInvalid, "an abandoned event names its writer and evidence")
		}
		switch a.Writer {
		case OwnerDrain, Sweep, GaveUp:
			if e.Token == 0 {
				return refuse(ErrRefused, "%s abandons with a token", a.Writer)
			}
		case ReconciledRequest:
			if p.AbandonRequested == nil {
				return refuse(ErrRefused, "nobody requested that it be abandoned")
			}
		default:
			return refuse(ErrInvalid, "unknown abandon writer %q", clip(string(a.Writer)))
		}
		if e.Token != 0 {
			return nil
		}
		if e.Authority == ByReconciledRequest && disp == ExternallyOwned {
			return nil
		}
		return refuse(ErrRefused, "abandoning %s work without a token", disp)
	default:
		// Progress: the newest attempt's runner, or the owner of external
		// work.
		if e.Token != 0 {
			if p.LastStart == nil || p.LastStart.Token != e.Token || p.Released {
				return refuse(ErrFenced, "only the runner of the newest attempt, not handed back, writes its progress")
			}
			return nil
		}
		if e.Authority == ByExternalOwner && disp == ExternallyOwned {
			return nil
		}
		return refuse(ErrRefused, "%s is written by the process's runner", e.Type)
	}
	// An outcome without a token.
	if e.Authority == ByExternalOwner && disp == ExternallyOwned {
		return nil
	}
	return refuse(ErrRefused, "a %s event needs its runner's token, or the external owner's authority for externally owned work", e.Type)
}
