package main

import (
	"fmt"
	"io"
	"time"

	"github.com/lash-run/lash/streams"
)

var rebuildCmd = &command{
	name:    "rebuild",
	summary: "rebuild lash-admin's projection cache from the streams",
	doc: `Throws lash-admin's projection cache away and folds the session stream again from its
start, with a progress bar on stderr, then prints what the cache holds: sessions, turns,
messages set aside as malformed, and how long it took. A cache another lash-admin has
open is not rebuilt.`,
	run: runRebuild,
}

type rebuildJSON struct {
	Sessions    int     `json:"sessions"`
	Turns       int     `json:"turns"`
	Quarantined int     `json:"quarantined"`
	Applied     uint64  `json:"applied"`
	TookMS      float64 `json:"took_ms"`
	Cache       string  `json:"cache"`
}

func runRebuild(a *app, _ []string) error {
	c, err := a.openCache(true)
	if err != nil {
		return err
	}
	a.cache = c
	last, err := a.client.LastSeq(a.ctx, streams.Sessions)
	if err != nil {
		return err
	}
	start := time.Now()
	bar := startProgress(a.stderr, a.errTTY, last, c.p.Applied)
	err = c.p.Rebuild(a.ctx)
	bar.finish()
	if err != nil {
		return err
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
	out := rebuildJSON{Sessions: len(heads), Quarantined: len(q), Applied: c.p.Applied(), TookMS: ms(took), Cache: c.root}
	for _, h := range heads {
		out.Turns += h.Turns
	}
	return a.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "rebuilt %s: %d sessions, %d turns, %d quarantined, through sequence %d in %s\n",
			c.root, out.Sessions, out.Turns, out.Quarantined, out.Applied, fmtDuration(took))
	})
}
