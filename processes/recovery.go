package processes

import (
	"encoding/json"
	"fmt"
)

// Action is what recovery does with a process whose runner may be gone.
type Action string

const (
	// Leave it: it ended, a live runner has it, or nothing proves its
	// started runner gone.
	Leave Action = "leave"
	// Execute: claim the lease and run an attempt.
	Execute Action = "execute"
	// CancelRun: claim the lease and end it cancelled, as requested,
	// without running it (again).
	CancelRun Action = "cancel"
	// AbandonDead: reclaim the lease of a runner proved dead and mark the
	// started work abandoned (writer sweep).
	AbandonDead Action = "abandon_dead"
	// AbandonLapsed: claim the lapsed lease and honour the abandon request
	// (writer reconciled_request).
	AbandonLapsed Action = "abandon_lapsed"
	// FinishRequested: honour the abandon request of externally owned work,
	// which has no lease.
	FinishRequested Action = "finish_requested"
)

// Facts are what recovery learns outside the process's log.
type Facts struct {
	// OwnerDead is evidence that the runner of the newest attempt is gone
	// (leases.Manager.DeathEvidence), or "".
	OwnerDead string
}

// Recover decides what recovery does with p, by its disposition. It never
// decides on elapsed time: a lease that lapsed lets a claim succeed, which
// lets work that may be run again run, and an operator's request be
// honoured; it never ends started owner-bound work by itself. Whether a
// live runner holds the lease is the claim's to find (it is then Busy,
// and recovery leaves the process).
func Recover(p *Process, f Facts) (Action, string) {
	switch {
	case p.Ended():
		return Leave, "it ended " + p.End.Type
	case p.Registration.Disposition == ExternallyOwned:
		if p.AbandonRequested != nil {
			return FinishRequested, fmt.Sprintf("abandon request, event %d", p.AbandonRequested.N)
		}
		return Leave, "lash never runs externally owned work"
	case p.Registration.Disposition == OwnerBound && p.Started():
		switch {
		case f.OwnerDead != "":
			return AbandonDead, f.OwnerDead
		case p.AbandonRequested != nil:
			return AbandonLapsed, fmt.Sprintf("abandon request, event %d, after the runner's lease lapsed", p.AbandonRequested.N)
		}
		return Leave, "started owner-bound work whose runner is not proved gone"
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
