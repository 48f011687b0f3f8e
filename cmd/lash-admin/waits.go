package main

import (
	"errors"
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

func endEventCmd(action string, revoke bool, summary, doc string) *command {
	return &command{
		name: "waits " + action, args: "EVENT", summary: summary, doc: doc, min: 1, max: 1,
		run: func(a *app, args []string) error {
			first, err := lash.EndEvent(a.ctx, a.client, args[0], revoke, "lash-admin")
			if errors.Is(err, lash.ErrBadInput) {
				return a.usagef("%v", err)
			}
			if err != nil {
				return err
			}
			out := struct {
				Event string `json:"event"`
				Ended bool   `json:"ended"`
			}{args[0], first}
			return a.emit(out, func(w io.Writer) {
				if first {
					row(w, out.Event, action+"d")
				} else {
					row(w, out.Event, "resolved already; unchanged")
				}
			})
		},
	}
}

var (
	waitsCancelCmd = endEventCmd("cancel", false, "end an event wait as cancelled",
		`Ends the event wait EVENT (an ev-... id, as "waits ls" shows it) as cancelled: the waiting tool
sees tools.ErrEventCancelled. Only the first resolution of an event stands: one already
resolved (or timed out) is left as it is.`)
	waitsRevokeCmd = endEventCmd("revoke", true, "revoke an event key for good",
		`Revokes the event EVENT's key: the waiting tool sees tools.ErrEventRevoked, and no later
resolution is taken. Only the first resolution of an event stands.`)
)
