package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/triggers"
)

var sessionsDeleteCmd = &command{
	name:    "sessions delete",
	args:    "ID",
	summary: "delete a session: its log, inputs, journal and grants on processes",
	doc: `Deletes a session for good. lash-admin takes the session's lease first, so no node
runs it meanwhile (a session a node is running is refused: try again when it is idle).
It revokes the session's grants on processes, which stop waking it; a process is never
cancelled by the deletion. It deletes the session's trigger subscriptions (tombstones). Then it marks the session deleted (<prefix>.sess.<ID>.gone,
for read models) and purges its log, inputs, snapshots and journal. It prints the
processes whose grants it revoked, and those left with no session holding a grant.
An input sent afterwards starts a new session under the same id, with no history.`,
	min: 1, max: 1,
	run: runSessionsDelete,
}

type deleteJSON struct {
	Session string   `json:"session"`
	Revoked []string `json:"revoked"`
	// Orphaned are the processes not ended that no session holds a grant
	// on any more: nobody is told when they end.
	Orphaned []string `json:"orphaned"`
	// Subscriptions are the session's trigger subscriptions, deleted.
	Subscriptions []string `json:"subscriptions"`
	Purged        []string `json:"purged"`
}

func runSessionsDelete(a *app, args []string) error {
	id := args[0]
	subj := a.client.Subjects()
	gone, err := subj.SessionGone(id)
	if err != nil {
		return a.usagef("session id: %v", err)
	}
	known, err := a.known(id)
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("no session %q", id)
	}
	// The lease keeps nodes off the session while it goes. Nodes take a
	// holder whose node has no liveness key for dead, so lash-admin beats
	// one for as long as this takes.
	m := leases.New(a.client, leases.LocalOwner("lash-admin"))
	if err := m.Beat(a.ctx, 30*time.Second); err != nil {
		return err
	}
	key, err := leases.Key("sess", id)
	if err != nil {
		return err
	}
	l, err := m.Claim(a.ctx, key, 30*time.Second)
	var busy *leases.BusyError
	if errors.As(err, &busy) {
		return fmt.Errorf("session %s is running on node %s; delete it when it is idle", id, busy.Holder.ID)
	}
	if err != nil {
		return err
	}
	defer func() { _ = m.Release(a.ctx, l) }()

	out := deleteJSON{Session: id, Revoked: []string{}, Orphaned: []string{}, Purged: []string{}}
	r := processes.New(a.client, "lash-admin")
	ps, _, err := r.List(a.ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if !p.Granted(id) {
			continue
		}
		after, err := r.Revoke(a.ctx, p.ID, id)
		if err != nil {
			return fmt.Errorf("revoking the grant on process %s: %w", p.ID, err)
		}
		out.Revoked = append(out.Revoked, p.ID)
		if !after.Ended() && len(after.Grants) == 0 {
			out.Orphaned = append(out.Orphaned, p.ID)
		}
	}
	// The session's trigger subscriptions end with it (tombstones: their
	// history stays); the operation ids make a second run of the
	// deletion change nothing.
	owner := triggers.Owner{Kind: triggers.Session, ID: id}
	subs, _, err := triggers.New(a.client, "lash-admin").List(a.ctx, &owner)
	if err != nil {
		return err
	}
	out.Subscriptions = []string{}
	for _, sub := range subs {
		if sub.Deleted {
			continue
		}
		op := triggers.Op{ID: fmt.Sprintf("session-delete:%s:%d", sub.ID, sub.Revision), Action: triggers.ActDelete, Subscription: sub.ID}
		if _, err := triggers.New(a.client, "lash-admin").Apply(a.ctx, op, &owner); err != nil {
			return fmt.Errorf("deleting subscription %s: %w", sub.ID, err)
		}
		out.Subscriptions = append(out.Subscriptions, sub.ID)
	}
	// The mark before the purges: read models drop the session on it, and
	// a fresh fold does too, whether or not the purges after it land.
	if _, _, err := a.client.Publish(a.ctx, streams.Publication{Subject: gone, Data: []byte(fmt.Sprintf(`{"deleted":%q}`, time.Now().UTC().Format(time.RFC3339Nano)))}); err != nil {
		return err
	}
	// Each subject but the mark, which stays for read models behind.
	logAndInputs, _ := a.logAndInputs(id)
	snap, _ := subj.SessionSnapshots(id)
	fx, err := subj.SessionEffects(id)
	if err != nil {
		return err
	}
	for _, f := range append(logAndInputs, snap, fx) {
		if err := a.client.Purge(a.ctx, f); err != nil {
			return err
		}
		out.Purged = append(out.Purged, f)
	}
	slices.Sort(out.Orphaned)
	return a.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "session %s deleted: %s purged\n", id, strings.Join(out.Purged, ", "))
		fmt.Fprintf(w, "grants revoked on %d processes: %s\n", len(out.Revoked), strings.Join(out.Revoked, ", "))
		if len(out.Orphaned) > 0 {
			fmt.Fprintf(w, "left with no session holding a grant: %s\n", strings.Join(out.Orphaned, ", "))
		}
		if len(out.Subscriptions) > 0 {
			fmt.Fprintf(w, "trigger subscriptions deleted: %s\n", strings.Join(out.Subscriptions, ", "))
		}
	})
}
