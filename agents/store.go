package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lash-run/lash/streams"
)

// Errors of the store.
var (
	ErrNotFound = errors.New("agents: no such agent")
	// ErrConflict: the agent's revision is not the one the write expected.
	ErrConflict = errors.New("agents: the agent changed")
	// ErrCorrupt: a stored record cannot be read.
	ErrCorrupt = errors.New("agents: unreadable record")
)

// RecordVersion is the version of the record format.
const RecordVersion = 1

// Store is what the agents need of the deployment's streams
// (*streams.Client).
type Store interface {
	Subjects() streams.Subjects
	Append(ctx context.Context, p streams.Publication, expect uint64) (seq uint64, duplicate bool, err error)
	Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error
	SignedHead(ctx context.Context, subject string) (*streams.Msg, uint64, error)
	PurgeBefore(ctx context.Context, subject string, seq uint64) error
	Tail(ctx context.Context, s streams.Stream, filters []string, from uint64, fn func(m *streams.Msg, pending uint64) error) error
	// Verify vouches for a record (streams.Client.Verify).
	Verify(m *streams.Msg) error
}

// Record is one revision of an agent on <prefix>.agent.<name>: a version
// of its definition, or its deletion.
type Record struct {
	V int `json:"v"`
	// Revision counts the agent's records, from 1; a deletion takes one
	// too, and a definition applied after it goes on from there.
	Revision   int         `json:"revision"`
	Version    string      `json:"version,omitempty"`
	Definition *Definition `json:"definition,omitempty"`
	Deleted    bool        `json:"deleted,omitempty"`
	By         string      `json:"by"`
	At         time.Time   `json:"at"`
	// Seq is the record's stream sequence (not stored).
	Seq uint64 `json:"-"`
}

// Ref names a revision: "name" is the current one, "name@N" revision N,
// "name@<hex>" the revision whose version starts with hex (8 digits at
// least).
func (r *Record) Ref() string {
	if r.Definition == nil {
		return ""
	}
	return r.Definition.Name + "@" + strconv.Itoa(r.Revision)
}

// tries bounds how often a write reads again after another writer moved
// the agent; each try follows a write that landed.
const tries = 16

// Agents reads and writes agent definitions.
type Agents struct {
	s      Store
	writer string
	now    func() time.Time
}

// New returns the agents of the deployment s opens; writer names who
// writes (a node id, an operator).
func New(s Store, writer string) *Agents {
	return &Agents{s: s, writer: writer, now: time.Now}
}

// Apply stores d as its agent's current definition, unless it is that
// already (changed false). ifRevision, when not negative, is the revision
// the caller read (0: the agent must not exist or be deleted): another is
// ErrConflict. d must pass Check.
func (a *Agents) Apply(ctx context.Context, d *Definition, ifRevision int) (*Record, bool, error) {
	if err := d.Check(nil); err != nil {
		return nil, false, err
	}
	n := d.normalized()
	subj, err := a.subject(d.Name)
	if err != nil {
		return nil, false, err
	}
	for range tries {
		head, at, err := a.head(ctx, subj)
		if err != nil {
			return nil, false, err
		}
		live := head != nil && !head.Deleted
		switch {
		case ifRevision >= 0 && (ifRevision == 0 && live || ifRevision > 0 && (head == nil || head.Revision != ifRevision || head.Deleted)):
			return head, false, fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, d.Name, revisionOf(head), ifRevision)
		case live && head.Version == n.Version():
			return head, false, nil
		}
		rec := &Record{V: RecordVersion, Revision: revisionOf(head) + 1, Version: n.Version(), Definition: n, By: a.writer, At: a.now().UTC()}
		if ok, err := a.write(ctx, subj, rec, at); err != nil || ok {
			return rec, ok, err
		}
	}
	return nil, false, fmt.Errorf("%w: %s kept changing under %d tries", ErrConflict, d.Name, tries)
}

// Delete marks the agent deleted: a revision saying so, after which Get
// and List do not show it. Deleting an agent that is not there is
// ErrNotFound.
func (a *Agents) Delete(ctx context.Context, name string, ifRevision int) (*Record, error) {
	subj, err := a.subject(name)
	if err != nil {
		return nil, err
	}
	for range tries {
		head, at, err := a.head(ctx, subj)
		switch {
		case err != nil:
			return nil, err
		case head == nil || head.Deleted:
			return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
		case ifRevision > 0 && head.Revision != ifRevision:
			return head, fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, name, head.Revision, ifRevision)
		}
		rec := &Record{V: RecordVersion, Revision: head.Revision + 1, Deleted: true, By: a.writer, At: a.now().UTC()}
		if ok, err := a.write(ctx, subj, rec, at); err != nil || ok {
			return rec, err
		}
	}
	return nil, fmt.Errorf("%w: %s kept changing under %d tries", ErrConflict, name, tries)
}

// write appends rec after the subject's sequence at; false when another
// writer moved the agent first.
func (a *Agents) write(ctx context.Context, subj string, rec *Record, at uint64) (bool, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	// The id names the content too: two writers of one revision with other
	// content must not pass for a retry of one another.
	what := rec.Version
	if rec.Deleted {
		what = "deleted"
	}
	seq, _, err := a.s.Append(ctx, streams.Publication{Subject: subj, Data: b,
		MsgID: fmt.Sprintf("agent:%s:%d:%s", subj, rec.Revision, what)}, at)
	var ce *streams.ConflictError
	switch {
	case errors.As(err, &ce):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("agents: writing %s: %w", subj, err)
	}
	rec.Seq = seq
	return true, nil
}

// Get returns the agent's current definition; a deleted agent, or one
// never applied, is ErrNotFound.
func (a *Agents) Get(ctx context.Context, name string) (*Record, error) {
	subj, err := a.subject(name)
	if err != nil {
		return nil, err
	}
	head, _, err := a.head(ctx, subj)
	if err != nil {
		return nil, err
	}
	if head == nil || head.Deleted {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return head, nil
}

// History returns every record of the agent, oldest first.
func (a *Agents) History(ctx context.Context, name string) ([]*Record, error) {
	subj, err := a.subject(name)
	if err != nil {
		return nil, err
	}
	var out []*Record
	err = a.s.Read(ctx, subj, 0, func(m *streams.Msg) error {
		if a.s.Verify(m) != nil {
			return nil // not written by a node or an operator: it changes nothing
		}
		r, err := decode(m)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return out, nil
}

// Resolve returns the revision ref names: "name", "name@N" or
// "name@<version prefix>".
func (a *Agents) Resolve(ctx context.Context, ref string) (*Record, error) {
	if _, err := CheckRef(ref); err != nil {
		return nil, err
	}
	name, rev, pinned := strings.Cut(ref, "@")
	if !pinned {
		return a.Get(ctx, name)
	}
	h, err := a.History(ctx, name)
	if err != nil {
		return nil, err
	}
	n, nerr := strconv.Atoi(rev)
	var found *Record
	for _, r := range h {
		if r.Deleted {
			continue
		}
		if nerr == nil && r.Revision == n || nerr != nil && strings.HasPrefix(r.Version, rev) {
			if found != nil && found.Version != r.Version {
				return nil, fmt.Errorf("%w: %q names more than one version", ErrInvalid, clip(ref))
			}
			found = r
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return found, nil
}

// List returns the current definition of every agent not deleted, and
// the subjects whose records cannot be read.
func (a *Agents) List(ctx context.Context) ([]*Record, map[string]error, error) {
	last := map[string]*Record{}
	var order []string
	bad := map[string]error{}
	err := a.s.Read(ctx, a.s.Subjects().AllAgents(), 0, func(m *streams.Msg) error {
		if a.s.Verify(m) != nil {
			return nil
		}
		r, err := decode(m)
		if err != nil {
			bad[m.Subject] = err
			return nil
		}
		if _, seen := last[m.Subject]; !seen {
			order = append(order, m.Subject)
		}
		last[m.Subject] = r
		delete(bad, m.Subject)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var out []*Record
	for _, s := range order {
		if r := last[s]; !r.Deleted {
			out = append(out, r)
		}
	}
	return out, bad, nil
}

// Prune removes every record of the agents deleted before cutoff (the
// deployment's retention, ADR 0035) and returns how many agents went;
// dryRun counts them only. A deleted agent's revisions stay readable until
// then, for operators and for sessions' turns begun under them.
func (a *Agents) Prune(ctx context.Context, cutoff time.Time, dryRun bool) (int, error) {
	last := map[string]*Record{}
	end := map[string]uint64{} // the last message of each subject, signed or not
	err := a.s.Read(ctx, a.s.Subjects().AllAgents(), 0, func(m *streams.Msg) error {
		end[m.Subject] = m.Seq
		if a.s.Verify(m) != nil {
			return nil
		}
		if r, err := decode(m); err == nil {
			last[m.Subject] = r
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for subj, r := range last {
		if !r.Deleted || !r.At.Before(cutoff) {
			continue
		}
		if !dryRun {
			// Through what was read only: an apply that lands meanwhile stays.
			if err := a.s.PurgeBefore(ctx, subj, end[subj]+1); err != nil {
				return n, fmt.Errorf("agents: pruning %s: %w", subj, err)
			}
		}
		n++
	}
	return n, nil
}

// head returns the agent's last record (nil when it has none) and the
// sequence a write after it must name.
func (a *Agents) head(ctx context.Context, subj string) (*Record, uint64, error) {
	m, at, err := a.s.SignedHead(ctx, subj)
	if errors.Is(err, streams.ErrNotFound) {
		return nil, at, nil
	}
	if err != nil {
		return nil, 0, err
	}
	r, err := decode(m)
	if err != nil {
		return nil, 0, err
	}
	return r, at, nil
}

func (a *Agents) subject(name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return a.s.Subjects().Agent(name)
}

func decode(m *streams.Msg) (*Record, error) {
	var r Record
	if err := json.Unmarshal(m.Data, &r); err != nil || r.V != RecordVersion || r.Revision < 1 || (r.Definition == nil) != r.Deleted {
		return nil, fmt.Errorf("%w: %s at %d", ErrCorrupt, m.Subject, m.Seq)
	}
	r.Seq = m.Seq
	return &r, nil
}

func revisionOf(r *Record) int {
	if r == nil {
		return 0
	}
	return r.Revision
}
