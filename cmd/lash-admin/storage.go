package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/lash-run/lash/lifecycle"
)

var storageCmd = &command{
	name:    "storage show",
	summary: "what the deployment stores: streams, kinds of records, objects, largest sessions",
	doc: `Shows what the deployment stores (ADR 0035): each stream's messages and bytes, the
messages of each kind of record (session logs, inputs, snapshots, journal records and
steps, process logs, trigger records, timers, deletion marks), the object store's objects
by kind (a turn's journal records, a session's commit bodies and snapshot; "shared" for the
deployment's own and those written before objects had owners), and the sessions holding
the most. "lash-admin storage sweep --dry-run" counts what a sweep would remove.`,
	run: runStorage,
}

var storageSweepCmd = &command{
	name:    "storage sweep",
	summary: "remove what has become garbage now (nodes do it every --sweep-every)",
	doc: `Removes what has become garbage (ADR 0035), as the nodes' sweeps do: the journals of
turns committed more than --retention ago with their objects, the durable steps of calls
done, processes ended more than --retention ago (or with no session left to tell) and the
sessions of the sub-agents among them, the trigger records of their deliveries, indexes of
waits whose calls are no longer parked, deletion marks older than --mark-ttl, and objects no
record names (older than --grace). Nothing live is touched: a turn not committed, a call
parked, a process not ended, a fired timer no node has taken. --dry-run counts and removes
nothing.`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.BoolVar(&a.sweep.DryRun, "dry-run", false, "count what would go, remove nothing")
		fs.DurationVar(&a.sweep.Retention, "retention", lifecycle.DefaultRetention, "how long ended work stays (as lash-node's --retention)")
		fs.DurationVar(&a.sweep.MarkTTL, "mark-ttl", lifecycle.DefaultMarkTTL, "how long deletion marks stay for read models behind")
		fs.DurationVar(&a.sweep.Grace, "grace", lifecycle.DefaultGrace, "leave objects nothing names younger than this")
	},
	check: func(a *app, _ []string) error {
		if a.sweep.Retention < time.Second || a.sweep.MarkTTL < time.Second || a.sweep.Grace < time.Second {
			return a.usagef("--retention, --mark-ttl and --grace must be at least 1s")
		}
		return nil
	},
	run: runStorageSweep,
}

func runStorage(a *app, _ []string) error {
	st, err := lifecycle.Report(a.ctx, a.client)
	if err != nil {
		return err
	}
	return a.emit(st, func(w io.Writer) {
		row(w, "STREAM", "MESSAGES", "BYTES")
		for _, s := range st.Streams {
			if s.Missing {
				row(w, s.Name, "(missing)", "-")
				continue
			}
			row(w, s.Name, s.Messages, bytesOf(s.Bytes))
		}
		fmt.Fprintln(w)
		row(w, "STREAM", "KIND", "MESSAGES")
		for _, k := range st.Kinds {
			if k.Messages > 0 {
				row(w, k.Stream, k.Kind, k.Messages)
			}
		}
		fmt.Fprintln(w)
		row(w, "OBJECTS", "COUNT", "BYTES")
		for _, k := range st.Objects {
			row(w, k.Kind, k.Messages, bytesOf(uint64(k.Bytes)))
		}
		if len(st.Sessions) > 0 {
			fmt.Fprintln(w)
			row(w, "SESSION", "MESSAGES", "OBJECT BYTES")
			for _, s := range st.Sessions {
				row(w, s.Session, s.Messages, bytesOf(uint64(s.ObjectBytes)))
			}
		}
	})
}

func runStorageSweep(a *app, _ []string) error {
	cfg := a.sweep
	cfg.Writer = "lash-admin"
	swept, err := lifecycle.Sweep(a.ctx, a.client, cfg)
	if err != nil {
		return err
	}
	return a.emit(swept, func(w io.Writer) {
		verb := "removed"
		if cfg.DryRun {
			verb = "would remove"
		}
		fmt.Fprintf(w, "%s: %d turns' journals, %d steps, %d processes, %d sub-agents' sessions, %d occurrences, %d deliveries, %d signals, %d receipts, %d subscriptions, %d waits, %d resolutions, %d marks, %d objects (%s)\n",
			verb, swept.Journals, swept.Steps, swept.Processes, swept.Sessions, swept.Occurrences, swept.Deliveries, swept.Signals,
			swept.Receipts, swept.Subscriptions, swept.Waits, swept.Resolutions, swept.Marks, swept.Objects, bytesOf(uint64(swept.ObjectBytes)))
	})
}
