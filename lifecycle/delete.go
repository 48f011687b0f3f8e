package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/triggers"
)

// Errors of DeleteSession.
var (
	// ErrUnknownSession: the id has no log, inputs or deletion mark.
	ErrUnknownSession = errors.New("lifecycle: no such session")
	// ErrRunning: a node runs the session; delete it when it is idle.
	ErrRunning = errors.New("lifecycle: session is running")
)

// Deletion is what DeleteSession removed.
type Deletion struct {
	Session string
	// Revoked are the processes whose grant the session held; Orphaned
	// those of them not ended that no session holds a grant on now.
	Revoked, Orphaned []string
	// Subscriptions are the session's trigger subscriptions, deleted.
	Subscriptions []string
	// Purged are the subjects (filters) purged.
	Purged []string
	// Objects and ObjectBytes count the payloads deleted from the object
	// store: the session's commit bodies, snapshot and journal records.
	Objects     int
	ObjectBytes int64
}

// DeleteSession deletes a session for good (ADR 0023, 0035): under its
// lease (a session a node runs is ErrRunning), it revokes the session's
// grants on processes (which go on), deletes its trigger subscriptions,
// marks it deleted for read models, and then removes every byte it owns:
// its log, inputs, snapshots, journal and steps, the objects they keep by
// reference, its live events, its timers and the indexes of its waits.
// writer names the operator in what it writes.
//
// A deletion cut short is finished by running it again (the mark makes
// the id known), or by a sweep, which finds the objects of a session
// without a log.
func DeleteSession(ctx context.Context, c *streams.Client, id, writer string) (*Deletion, error) {
	ds, err := DeleteSessions(ctx, c, []string{id}, writer)
	if err != nil {
		return nil, err
	}
	return ds[0], nil
}

// DeleteSessions is DeleteSession of each of ids, in order, reading the
// processes, subscriptions and wait indexes they may hold once for all. It
// stops at the first that fails, returning those deleted before it.
func DeleteSessions(ctx context.Context, c *streams.Client, ids []string, writer string) ([]*Deletion, error) {
	m := leases.New(c, leases.LocalOwner(writer))
	if err := m.Beat(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	grants, err := grantsOf(ctx, c, writer)
	if err != nil {
		return nil, err
	}
	events, err := eventWaits(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []*Deletion
	for _, id := range ids {
		d, err := deleteSession(ctx, c, m, id, writer, grants[id], events[id])
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

func deleteSession(ctx context.Context, c *streams.Client, m *leases.Manager, id, writer string, granted []string, events []string) (*Deletion, error) {
	subj := c.Subjects()
	gone, err := subj.SessionGone(id)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: session id: %w", err)
	}
	ev, err := subj.SessionEvents(id)
	if err != nil {
		return nil, err
	}
	inputs, err := subj.SessionInputChannels(id)
	if err != nil {
		return nil, err
	}
	snap, _ := subj.SessionSnapshots(id)
	known := false
	for _, s := range append([]string{ev, gone, snap}, inputs...) {
		_, err := c.Head(ctx, s)
		if err == nil {
			known = true
			break
		}
		if !errors.Is(err, streams.ErrNotFound) {
			return nil, err
		}
	}
	if !known {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSession, id)
	}
	// The lease keeps nodes off the session while it goes. Nodes take a
	// holder whose node has no liveness key for dead, so the deleter beats
	// one (DeleteSessions) for as long as this takes.
	key, err := leases.Key("sess", id)
	if err != nil {
		return nil, err
	}
	l, err := m.Claim(ctx, key, 30*time.Second)
	var busy *leases.BusyError
	if errors.As(err, &busy) {
		return nil, fmt.Errorf("%w: session %s is running on node %s", ErrRunning, id, busy.Holder.ID)
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = m.Release(context.WithoutCancel(ctx), l) }()

	out := &Deletion{Session: id, Revoked: []string{}, Orphaned: []string{}, Subscriptions: []string{}, Purged: []string{}}
	if err := revokeGrants(ctx, c, id, writer, granted, out); err != nil {
		return nil, err
	}
	if err := deleteSubscriptions(ctx, c, id, writer, out); err != nil {
		return nil, err
	}
	store := blobs.New(c, blobs.Limits{Inline: c.Config().InlineBytes, Max: c.Config().MaxPayloadBytes})
	// What the log and the snapshot keep by reference, read before they go.
	type owned struct {
		owner blobs.Owner
		ref   blobs.Ref
	}
	var objects []owned
	log := sessionlog.New(c)
	if _, _, err := log.ReadEntries(ctx, id, 0, func(_ uint64, e *sessionlog.Entry) error {
		if e.ByRef() {
			objects = append(objects, owned{sessionlog.BodyOwner(id), e.BodyRef()})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if ref, ok, err := sessionlog.SnapshotRef(ctx, c, id); err != nil {
		return nil, err
	} else if ok {
		objects = append(objects, owned{sessionlog.SnapshotOwner(id), ref})
	}
	// The mark before the purges: read models drop the session on it, and
	// a fresh fold does too, whether or not the purges after it land.
	mark := fmt.Appendf(nil, `{"deleted":%q}`, time.Now().UTC().Format(time.RFC3339Nano))
	if _, _, err := c.Publish(ctx, streams.Publication{Subject: gone, Data: mark}); err != nil {
		return nil, err
	}
	records, err := subj.SessionRecords(id)
	if err != nil {
		return nil, err
	}
	fx, err := subj.SessionEffects(id)
	if err != nil {
		return nil, err
	}
	n, b, err := effectlog.New(c, effectlog.WithBlobs(store)).Drop(ctx, records, fx)
	if err != nil {
		return nil, err
	}
	out.Objects, out.ObjectBytes = n, b
	out.Purged = append(out.Purged, fx)
	for _, o := range objects {
		n, err := store.Delete(ctx, o.owner, o.ref)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out.Objects++
			out.ObjectBytes += n
		}
	}
	live, err := subj.Live(id)
	if err != nil {
		return nil, err
	}
	purge := append(append([]string{ev, snap}, inputs...), live)
	purge = append(purge, subj.SessionTimers(id)...)
	for _, e := range events {
		for _, f := range []func(string) (string, error){subj.EventWait, subj.EventResolution, subj.EventSignal} {
			s, err := f(e)
			if err != nil {
				return nil, err
			}
			purge = append(purge, s)
		}
	}
	for _, f := range purge {
		if err := c.Purge(ctx, f); err != nil {
			return nil, err
		}
		out.Purged = append(out.Purged, f)
	}
	slices.Sort(out.Orphaned)
	return out, nil
}

// grantsOf lists the processes each session holds a grant on.
func grantsOf(ctx context.Context, c *streams.Client, writer string) (map[string][]string, error) {
	ps, _, err := processes.New(c, writer).List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, p := range ps {
		for _, s := range p.Grants {
			out[s] = append(out[s], p.ID)
		}
	}
	return out, nil
}

// revokeGrants ends the session's grants on the processes granted: they
// stop waking it, and go on.
func revokeGrants(ctx context.Context, c *streams.Client, id, writer string, granted []string, out *Deletion) error {
	r := processes.New(c, writer)
	for _, pid := range granted {
		after, err := r.Revoke(ctx, pid, id)
		if errors.Is(err, processes.ErrUnknown) {
			continue // pruned since it was listed: nothing to revoke
		}
		if err != nil {
			return fmt.Errorf("revoking the grant on process %s: %w", pid, err)
		}
		out.Revoked = append(out.Revoked, pid)
		if !after.Ended() && len(after.Grants) == 0 {
			out.Orphaned = append(out.Orphaned, pid)
		}
	}
	return nil
}

// deleteSubscriptions ends the session's trigger subscriptions
// (tombstones); the operation ids make a second run change nothing.
func deleteSubscriptions(ctx context.Context, c *streams.Client, id, writer string, out *Deletion) error {
	t := triggers.New(c, writer)
	owner := triggers.Owner{Kind: triggers.Session, ID: id}
	subs, _, err := t.List(ctx, &owner)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		if sub.Deleted {
			continue
		}
		op := triggers.Op{ID: fmt.Sprintf("session-delete:%s:%d", sub.ID, sub.Revision), Action: triggers.ActDelete, Subscription: sub.ID}
		if _, err := t.Apply(ctx, op, &owner); err != nil {
			return fmt.Errorf("deleting subscription %s: %w", sub.ID, err)
		}
		out.Subscriptions = append(out.Subscriptions, sub.ID)
	}
	return nil
}

// eventWaits lists the events each session's calls wait for, from their
// index (ADR 0026).
func eventWaits(ctx context.Context, c *streams.Client) (map[string][]string, error) {
	subj := c.Subjects()
	out := map[string][]string{}
	prefix := strings.TrimSuffix(subj.AllTriggers("await"), "*")
	err := c.Read(ctx, subj.AllTriggers("await"), 0, func(m *streams.Msg) error {
		var w struct {
			Session string `json:"session"`
		}
		if json.Unmarshal(m.Data, &w) != nil {
			return nil
		}
		if e, err := streams.ParseToken(strings.TrimPrefix(m.Subject, prefix)); err == nil {
			out[w.Session] = append(out[w.Session], e)
		}
		return nil
	})
	return out, err
}
