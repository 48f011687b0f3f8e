package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lash-run/lash/lifecycle"
)

var sessionsDeleteCmd = &command{
	name:    "sessions delete",
	args:    "ID...",
	summary: "delete a session and everything it owns, for good",
	doc: `Deletes a session for good. lash-admin takes the session's lease first, so no node
runs it meanwhile (a session a node is running is refused: try again when it is idle).
It revokes the session's grants on processes, which stop waking it; a process is never
cancelled by the deletion. It deletes the session's trigger subscriptions (tombstones).
Then it marks the session deleted (<prefix>.sess.<ID>.gone, for read models) and removes
everything the session owns: its log, inputs, snapshots, journal and durable steps, the
objects they keep in the object store, its live events, its timers and the indexes of its
waits. It prints what it purged, the objects it deleted, the processes whose grants it
revoked, and those left with no session holding a grant. A deletion cut short is finished
by running it again. An input sent afterwards starts a new session under the same id,
with no history. Several ids are deleted in order, reading the deployment's processes
once for all; the first that fails stops the rest. With --json, one object per session.`,
	min: 1, max: -1,
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
	// Objects and ObjectBytes are the payloads deleted from the object
	// store.
	Objects     int   `json:"objects"`
	ObjectBytes int64 `json:"object_bytes"`
}

func runSessionsDelete(a *app, args []string) error {
	for _, id := range args {
		if _, err := a.client.Subjects().SessionGone(id); err != nil {
			return a.usagef("session id: %v", err)
		}
	}
	ds, err := lifecycle.DeleteSessions(a.ctx, a.client, args, "lash-admin")
	for _, d := range ds {
		out := deleteJSON{Session: d.Session, Revoked: d.Revoked, Orphaned: d.Orphaned, Subscriptions: d.Subscriptions, Purged: d.Purged,
			Objects: d.Objects, ObjectBytes: d.ObjectBytes}
		if eerr := a.emit(out, func(w io.Writer) {
			fmt.Fprintf(w, "session %s deleted: %s purged; %d objects (%s) deleted\n", out.Session, strings.Join(out.Purged, ", "), out.Objects, bytesOf(uint64(out.ObjectBytes)))
			fmt.Fprintf(w, "grants revoked on %d processes: %s\n", len(out.Revoked), strings.Join(out.Revoked, ", "))
			if len(out.Orphaned) > 0 {
				fmt.Fprintf(w, "left with no session holding a grant: %s\n", strings.Join(out.Orphaned, ", "))
			}
			if len(out.Subscriptions) > 0 {
				fmt.Fprintf(w, "trigger subscriptions deleted: %s\n", strings.Join(out.Subscriptions, ", "))
			}
		}); eerr != nil {
			return eerr
		}
	}
	switch {
	case errors.Is(err, lifecycle.ErrUnknownSession):
		return fmt.Errorf("no session %q", args[len(ds)])
	case errors.Is(err, lifecycle.ErrRunning):
		return fmt.Errorf("%v; delete it when it is idle", err)
	}
	return err
}
