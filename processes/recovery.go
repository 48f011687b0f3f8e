package processes

import (
	"encoding/json"
	"fmt"
)

// Action is what recovery does with a process whose runner may be gone.
type Action string

const (
	// Leave it: it ended, a runner that may be alive runs it, or it is
	// externally owned and nobody asked to end it.
	Leave Action = "leave"
	// Execute: start an attempt and run it.
	Execute Action = "execute"
	// CancelRun: end it cancelled, as requested, without running it
	// (again).
	CancelRun Action = "cancel"
	// AbandonDead: mark started owner-bound work whose runner is gone
	// abandoned (writer sweep).
	AbandonDead Action = "abandon_dead"
	// HonourAbandon: mark started owner-bound work whose runner is gone
	// abandoned as an operator requested (writer reconciled_request).
	HonourAbandon Action = "honour_abandon"
	// FinishRequested: honour the abandon request of externally owned work,
	// which lash never runs.
	FinishRequested Action = "finish_requested"
)

// Facts are what recovery learns outside the process's log.
type Facts struct {
	// RunnerGone is evidence that the runner of the newest attempt no
	// longer runs it: its node's liveness or PID gone
	// (leases.Manager.DeathEvidence), or its own node's word. "" when
	// nothing shows it.
	RunnerGone string
}

// Recover decides what recovery does with p, by its disposition. It never
// decides on elapsed time: an attempt whose runner is not shown gone is
// left to it, however long it runs (its runner's node ends it, or dies
// and is shown dead). Work that may run again runs again; started
// owner-bound work is only ever abandoned.
func Recover(p *Process, f Facts) (Action, string) {
	switch {
	case p.Ended():
		return Leave, "it ended " + p.End.Type
	case p.Registration.Disposition == ExternallyOwned:
		if p.AbandonRequested != nil {
			return FinishRequested, fmt.Sprintf("abandon request, event %d", p.AbandonRequested.N)
		}
		return Leave, "lash never runs externally owned work"
	case p.InAttempt() && f.RunnerGone == "":
		return Leave, fmt.Sprintf("the runner of attempt %d is not shown gone", p.LastStart.Attempt)
	case p.Registration.Disposition == OwnerBound && p.Started():
		if p.AbandonRequested != nil {
			return HonourAbandon, fmt.Sprintf("abandon request, event %d; %s", p.AbandonRequested.N, f.RunnerGone)
		}
		return AbandonDead, f.RunnerGone
	case p.CancelRequested != nil:
		return CancelRun, cancelReason(p.CancelRequested)
	}
	return Execute, ""
}

// cancelReason is what a process ended by cancel request cr records as
// its reason, whichever writer ends it: the worker running it or one that
// claims it after.
func cancelReason(cr *Event) string {
	var r Request
	if json.Unmarshal(cr.Data, &r) != nil || r.Reason == "" {
		return fmt.Sprintf("cancel request, event %d", cr.N)
	}
	return fmt.Sprintf("cancel request, event %d: %s", cr.N, r.Reason)
}
