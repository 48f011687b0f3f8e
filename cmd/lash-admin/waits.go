package main

import (
	"io"

	"github.com/lash-run/lash"
)

var waitsLsCmd = &command{
	name:    "waits ls",
	summary: "calls parked by the built-in tools, and what wakes each",
	doc: `Lists the calls parked by sleep, wait_for_signal, process_await and wait_for_approval,
from the projection cache: session, call, and what wakes it (a timer at a time, a
signal subject, a process's end, or a decision). "pending" marks sessions with inputs
waiting, which may hold the wake already.`,
	run: func(a *app, _ []string) error {
		p, err := a.projection()
		if err != nil {
			return err
		}
		ws, err := lash.ParkedWaits(p)
		if err != nil {
			return err
		}
		out := struct {
			Waits []lash.ParkedWait `json:"waits"`
		}{append([]lash.ParkedWait{}, ws...)}
		return a.emit(out, func(w io.Writer) {
			row(w, "SESSION", "CALL", "TOOL", "WOKEN BY", "PENDING")
			for _, x := range ws {
				row(w, x.Session, x.Call, x.Tool, x.WokenBy, x.Pending)
			}
		})
	},
}
