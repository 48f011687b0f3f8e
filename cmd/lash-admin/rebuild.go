package main

import (
	"fmt"
	"io"
	"time"

	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
)

var rebuildCmd = &command{
	name:    "rebuild",
	summary: "rebuild lash-admin's projection cache from the streams",
	doc: `Throws lash-admin's projection cache away and folds the session and signal streams
again from their start, with a progress bar on stderr, then prints what the cache holds:
sessions, turns, messages set aside as malformed, and how long it took. A cache another
lash-admin has open is not rebuilt.`,
	run: runRebuild,
}

type rebuildJSON struct {
	Sessions    int `json:"sessions"`
	Turns       int `json:"turns"`
	Quarantined int `json:"quarantined"`
	// Applied, SignalsApplied and ProcessesApplied are the last sequences
	// folded from the session stream, the trigger stream (signals, and
	// trigger records checked for their signatures) and the process stream.
	Applied          uint64  `json:"applied"`
	SignalsApplied   uint64  `json:"signals_applied"`
	ProcessesApplied uint64  `json:"processes_applied"`
	TookMS           float64 `json:"took_ms"`
	Cache            string  `json:"cache"`
}

func runRebuild(a *app, _ []string) error {
	c, err := a.openCache(true)
	if err != nil {
		return err
	}
	a.cache = c
	lastSession, err := a.client.LastSeq(a.ctx, streams.Sessions)
	if err != nil {
		return err
	}
	lastSignal, err := a.client.LastSeq(a.ctx, streams.Triggers)
	if err != nil {
		return err
	}
	lastProcess, err := a.client.LastSeq(a.ctx, streams.Processes)
	if err != nil {
		return err
	}
	start := time.Now()
	for _, f := range []struct {
		label string
		p     *projector.Projector
		last  uint64
	}{{"sessions", c.p, lastSession}, {"signals", c.signals, lastSignal}, {"processes", c.procs, lastProcess}} {
		bar := startProgress(f.label, a.stderr, a.errTTY, f.last, f.p.Applied)
		err := f.p.Rebuild(a.ctx)
		bar.finish()
		if err != nil {
			return err
		}
	}
	took := time.Since(start)
	heads, err := c.p.Sessions()
	if err != nil {
		return err
	}
	q, err := c.p.Quarantine()
	if err != nil {
		return err
	}
	qs, err := c.signals.Quarantine()
	if err != nil {
		return err
	}
	qp, err := c.procs.Quarantine()
	if err != nil {
		return err
	}
	out := rebuildJSON{Sessions: len(heads), Quarantined: len(q) + len(qs) + len(qp), Applied: c.p.Applied(),
		SignalsApplied: c.signals.Applied(), ProcessesApplied: c.procs.Applied(), TookMS: ms(took), Cache: c.root}
	for _, h := range heads {
		out.Turns += h.Turns
	}
	return a.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "rebuilt %s: %s, %s, %d quarantined, through sequence %d in %s\n",
			c.root, plural(out.Sessions, "session"), plural(out.Turns, "turn"), out.Quarantined, out.Applied, fmtDuration(took))
	})
}
