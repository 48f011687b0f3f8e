package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
)

var processesLsCmd = &command{
	name:    "processes ls",
	summary: "processes: background tools, sub-agents, external work",
	doc: `Lists the deployment's processes, folded from their logs on the PROCESSES stream
(<prefix>.proc.<pid>.ev), oldest first: id, status (pending, running, waiting,
completed, failed, cancelled, abandoned), disposition, what it runs, the session that
started it, attempts and events. --status and --session filter. A process whose log
cannot be read is listed with status "unreadable".`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.status, "status", "", "only processes with this `status`; \"open\" for those not ended")
		fs.StringVar(&a.session, "session", "", "only processes started by, or waking, this `session`")
	},
	run: runProcessesLs,
}

var processesShowCmd = &command{
	name:    "processes show",
	args:    "PID",
	summary: "one process: registration, attempts, requests, outcome, runner",
	doc: `Shows a process as its log says: its registration (input, disposition, declared
event types, provenance, wake target), the first and newest attempts (who ran them,
under which fencing token), cancel and abandon requests, the outcome, and, while an
attempt is open, whether its runner's node is alive (its liveness key).`,
	min: 1, max: 1,
	run: runProcessesShow,
}

var processesEventsCmd = &command{
	name:    "processes events",
	args:    "PID",
	summary: "a process's events, as stored",
	doc:     `Prints the process's events in order, one JSON object each with --json.`,
	min:     1, max: 1,
	run: runProcessesEvents,
}

var processesCancelCmd = &command{
	name:    "processes cancel",
	args:    "PID",
	summary: "ask a process's runner to stop",
	doc: `Appends a cancel request (cancel_requested) to the process's log: its runner stops the
work and ends it cancelled; a process nobody runs yet ends cancelled unrun. A second
request changes nothing.`,
	min: 1, max: 1,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.reason, "reason", "", "why, for the log")
	},
	run: runProcessesCancel,
}

var processesAbandonCmd = &command{
	name:    "processes abandon",
	args:    "PID",
	summary: "request that a process whose runner is gone be marked abandoned",
	doc: `Appends an abandon request (abandon_requested). Recovery honours it once nothing runs
the process: started owner-bound work whose runner is gone, or externally
owned work, is marked abandoned (writer reconciled_request); the outcome stays unknown.
A live runner's work is never abandoned by a request.`,
	min: 1, max: 1,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.reason, "reason", "", "why, for the log")
	},
	run: runProcessesAbandon,
}

var processesPruneCmd = &command{
	name:    "processes prune",
	summary: "remove the logs of processes that ended long ago",
	doc: `Removes the logs of the processes that ended more than --older-than ago, and prints
their ids. A process that has not ended is never removed, whatever its age. Every
node's process worker reads the PROCESSES stream from its start, so pruning bounds
how long that takes.`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.DurationVar(&a.olderThan, "older-than", 0, "remove processes that ended more than this `duration` ago (required; at least 1m)")
	},
	check: func(a *app, _ []string) error {
		if a.olderThan < time.Minute {
			return a.usagef("--older-than %s: give a duration of at least 1m", a.olderThan)
		}
		return nil
	},
	run: runProcessesPrune,
}

var processesGrantCmd = &command{
	name:    "processes grant",
	args:    "PID SESSION",
	summary: "let a session address a process, or transfer a session's grant",
	doc: `Grants SESSION the right to address the process: await it, cancel it, and be told
when it ends if it is the wake target. With --from, the grant of that session moves
to SESSION. A grant held already is not written again.`,
	min: 2, max: 2,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.session, "from", "", "transfer the grant of this `session`")
	},
	run: runProcessesGrant,
}

var processesRevokeCmd = &command{
	name:    "processes revoke",
	args:    "PID SESSION",
	summary: "end a session's grant on a process",
	doc: `Ends SESSION's grant on the process: it can no longer address it, and is not told
when it ends. The process goes on. Processes left with no grant are listed by
"processes ls" with no session able to await them.`,
	min: 2, max: 2,
	run: runProcessesRevoke,
}

type processJSON struct {
	ID          string    `json:"id"`
	Status      string    `json:"status"`
	Disposition string    `json:"disposition"`
	Kind        string    `json:"kind"`
	What        string    `json:"what"`
	Label       string    `json:"label,omitempty"`
	Session     string    `json:"session,omitempty"`
	Host        string    `json:"host,omitempty"`
	WakeTarget  string    `json:"wake_target,omitempty"`
	Attempts    int       `json:"attempts"`
	Events      uint64    `json:"events"`
	Registered  time.Time `json:"registered"`
	Ended       time.Time `json:"ended,omitzero"`
	Grants      []string  `json:"grants"`
	Error       string    `json:"error,omitempty"`
}

func processRow(p *processes.Process) processJSON {
	reg := p.Registration
	in := reg.Input
	what := in.Tool
	switch in.Kind {
	case processes.SessionTurn:
		what = in.Session
	case processes.External:
		what = in.ExternalRef
	}
	out := processJSON{ID: p.ID, Status: string(p.Status()), Disposition: string(reg.Disposition), Kind: string(in.Kind), What: what,
		Label: reg.Label, Session: reg.Provenance.Session, Host: reg.Provenance.Host, WakeTarget: reg.WakeTarget,
		Attempts: p.Attempts(), Events: p.Events, Registered: utc(p.Registered), Grants: append([]string{}, p.Grants...)}
	if p.End != nil {
		out.Ended = utc(p.End.At)
	}
	return out
}

func runProcessesLs(a *app, _ []string) error {
	switch a.status {
	case "", "open", "pending", "running", "waiting", "completed", "failed", "cancelled", "abandoned", "unreadable":
	default:
		return a.usagef("--status %q: one of open, pending, running, waiting, completed, failed, cancelled, abandoned, unreadable", a.status)
	}
	ps, unreadable, err := processes.New(a.client, "lash-admin").List(a.ctx)
	if err != nil {
		return err
	}
	out := struct {
		Processes []processJSON `json:"processes"`
	}{Processes: []processJSON{}}
	for _, p := range ps {
		r := processRow(p)
		switch {
		case a.status == "open" && p.Ended(), a.status != "" && a.status != "open" && a.status != r.Status:
			continue
		case a.session != "" && r.Session != a.session && r.WakeTarget != a.session:
			continue
		}
		out.Processes = append(out.Processes, r)
	}
	ids := make([]string, 0, len(unreadable))
	for id := range unreadable {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if a.status == "" || a.status == "unreadable" {
			out.Processes = append(out.Processes, processJSON{ID: id, Status: "unreadable", Error: unreadable[id].Error()})
		}
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "ID", "STATUS", "DISPOSITION", "KIND", "WHAT", "SESSION", "ATTEMPTS", "EVENTS", "REGISTERED", "ENDED")
		for _, p := range out.Processes {
			row(w, p.ID, p.Status, p.Disposition, p.Kind, p.What, p.Session, p.Attempts, p.Events, fmtTime(p.Registered), fmtTime(p.Ended))
		}
	})
}

// process folds one process, as the commands name it.
func (a *app) process(id string) (*processes.Registry, *processes.Process, error) {
	r := processes.New(a.client, "lash-admin")
	p, err := r.Get(a.ctx, id)
	if errors.Is(err, processes.ErrUnknown) || errors.Is(err, processes.ErrInvalid) {
		return nil, nil, fmt.Errorf("no process %q", id)
	}
	return r, p, err
}

type processShowJSON struct {
	processJSON
	Registration     processes.Registration `json:"registration"`
	Hash             string                 `json:"hash"`
	FirstStart       *processes.Start       `json:"first_start,omitempty"`
	LastStart        *processes.Start       `json:"last_start,omitempty"`
	CancelRequested  *processes.Event       `json:"cancel_requested,omitempty"`
	AbandonRequested *processes.Event       `json:"abandon_requested,omitempty"`
	End              *processes.Event       `json:"end,omitempty"`
	Runner           *runnerJSON            `json:"runner,omitempty"`
}

// runnerJSON is the runner of a process's open attempt, as its node's
// liveness shows it.
type runnerJSON struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	Attempt     int    `json:"attempt"`
	Token       uint64 `json:"token"`
	Alive       bool   `json:"alive"`
	// Gone is the evidence that it is not, when it is not.
	Gone string `json:"gone,omitempty"`
}

func runProcessesShow(a *app, args []string) error {
	_, p, err := a.process(args[0])
	if err != nil {
		return err
	}
	out := processShowJSON{processJSON: processRow(p), Registration: p.Registration, Hash: p.Hash, FirstStart: p.FirstStart,
		LastStart: p.LastStart, CancelRequested: p.CancelRequested, AbandonRequested: p.AbandonRequested, End: p.End}
	if s := p.LastStart; p.InAttempt() {
		gone, err := leases.New(a.client, leases.Owner{ID: "lash-admin"}).DeathEvidence(a.ctx, s.Owner.Lease())
		if err != nil {
			return err
		}
		out.Runner = &runnerJSON{Node: s.Owner.Node, Incarnation: s.Owner.Incarnation, Attempt: s.Attempt, Token: s.Token, Alive: gone == "", Gone: gone}
	}
	return a.emit(out, func(w io.Writer) {
		reg, _ := json.Marshal(p.Registration.Input)
		row(w, "process", out.ID)
		row(w, "status", out.Status)
		row(w, "disposition", out.Disposition)
		row(w, "input", string(reg))
		row(w, "started by", out.Session+out.Host)
		row(w, "wake target", out.WakeTarget)
		row(w, "grants", strings.Join(out.Grants, ", "))
		row(w, "registered", fmtTime(out.Registered))
		if s := p.FirstStart; s != nil {
			row(w, "first attempt", fmt.Sprintf("%s/%s, token %d, %s", s.Owner.Node, s.Owner.Incarnation, s.Token, fmtTime(utc(p.StartedAt))))
		}
		if s := p.LastStart; s != nil {
			row(w, "attempts", fmt.Sprintf("%d, newest by %s/%s, token %d", s.Attempt, s.Owner.Node, s.Owner.Incarnation, s.Token))
		}
		if e := p.CancelRequested; e != nil {
			row(w, "cancel requested", fmt.Sprintf("event %d by %s: %s", e.N, e.By, e.Data))
		}
		if e := p.AbandonRequested; e != nil {
			row(w, "abandon requested", fmt.Sprintf("event %d by %s: %s", e.N, e.By, e.Data))
		}
		if e := p.End; e != nil {
			row(w, "outcome", fmt.Sprintf("%s at %s by %s: %s", e.Type, fmtTime(utc(e.At)), e.By, e.Data))
		}
		switch r := out.Runner; {
		case r == nil:
			row(w, "runner", "none")
		case r.Alive:
			row(w, "runner", fmt.Sprintf("%s/%s runs attempt %d (its node is alive)", r.Node, r.Incarnation, r.Attempt))
		default:
			row(w, "runner", fmt.Sprintf("%s/%s, attempt %d, gone: %s", r.Node, r.Incarnation, r.Attempt, r.Gone))
		}
	})
}

func runProcessesEvents(a *app, args []string) error {
	r, p, err := a.process(args[0])
	if err != nil {
		return err
	}
	evs, err := r.Events(a.ctx, p.ID, 0)
	if err != nil {
		return err
	}
	out := struct {
		Events []processes.Event `json:"events"`
	}{Events: evs}
	return a.emit(out, func(w io.Writer) {
		row(w, "N", "TYPE", "KEY", "TOKEN", "BY", "AT", "DATA")
		for _, e := range evs {
			row(w, e.N, e.Type, e.Key, e.Token, e.By, fmtTime(utc(e.At)), string(e.Data))
		}
	})
}

func runProcessesCancel(a *app, args []string) error {
	r, p, err := a.process(args[0])
	if err != nil {
		return err
	}
	e, err := r.RequestCancel(a.ctx, p.ID, a.reason)
	return a.requested(p.ID, e, err)
}

func runProcessesAbandon(a *app, args []string) error {
	r, p, err := a.process(args[0])
	if err != nil {
		return err
	}
	e, err := r.RequestAbandon(a.ctx, p.ID, a.reason)
	return a.requested(p.ID, e, err)
}

func (a *app) requested(id string, e *processes.Event, err error) error {
	if errors.Is(err, processes.ErrTerminal) {
		return fmt.Errorf("process %s has ended; nothing to request", id)
	}
	if err != nil {
		return err
	}
	out := struct {
		Process string `json:"process"`
		Event   uint64 `json:"event"`
		Type    string `json:"type"`
		By      string `json:"by"`
	}{id, e.N, e.Type, e.By}
	return a.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "%s requested on process %s (event %d by %s)\n", e.Type, id, e.N, e.By)
	})
}

func runProcessesPrune(a *app, _ []string) error {
	pruned, err := processes.New(a.client, "lash-admin").Prune(a.ctx, time.Now().Add(-a.olderThan))
	out := struct {
		Pruned []string `json:"pruned"`
	}{Pruned: append([]string{}, pruned...)}
	if err != nil {
		return fmt.Errorf("pruned %d processes, then: %w", len(pruned), err)
	}
	return a.emit(out, func(w io.Writer) {
		for _, id := range out.Pruned {
			fmt.Fprintln(w, id)
		}
		fmt.Fprintf(w, "%d processes pruned\n", len(out.Pruned))
	})
}

func runProcessesGrant(a *app, args []string) error {
	r, p, err := a.process(args[0])
	if err != nil {
		return err
	}
	if p, err = r.Grant(a.ctx, p.ID, args[1], a.session); err != nil {
		return err
	}
	return a.emitGrants(p)
}

func runProcessesRevoke(a *app, args []string) error {
	r, p, err := a.process(args[0])
	if err != nil {
		return err
	}
	if p, err = r.Revoke(a.ctx, p.ID, args[1]); err != nil {
		return err
	}
	return a.emitGrants(p)
}

func (a *app) emitGrants(p *processes.Process) error {
	out := struct {
		Process string   `json:"process"`
		Grants  []string `json:"grants"`
	}{p.ID, append([]string{}, p.Grants...)}
	return a.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "process %s: grants %s\n", p.ID, strings.Join(out.Grants, ", "))
	})
}
