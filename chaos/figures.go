package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Figures are what a run measured under its faults.
type Figures struct {
	// Turns per second committed while some fault held and while none did
	// (during the run, before the final heal).
	TurnsPerSecFaulted float64 `json:"turns_per_sec_faulted"`
	TurnsPerSecQuiet   float64 `json:"turns_per_sec_quiet"`
	// ByKind has, per fault kind, the time from the step's heal to full
	// service (every input acknowledged before the heal consumed), and
	// the longest wait of an input acknowledged while the step held.
	ByKind map[FaultKind]KindFigures `json:"by_kind"`
}

// KindFigures are one fault kind's figures over the steps that had it.
type KindFigures struct {
	Steps    int  `json:"steps"`
	Recovery Stat `json:"recovery"`
	Stall    Stat `json:"stall"`
}

// Stat summarizes durations.
type Stat struct {
	Mean time.Duration `json:"mean"`
	Max  time.Duration `json:"max"`
}

func (s *Stat) add(d time.Duration, n int) {
	s.Mean += (d - s.Mean) / time.Duration(n)
	s.Max = max(s.Max, d)
}

func figures(steps []AppliedStep, v *Verdict) Figures {
	f := Figures{ByKind: map[FaultKind]KindFigures{}}
	if len(steps) == 0 || v == nil {
		return f
	}
	var faulted, quiet time.Duration
	var inFault, inQuiet int
	runStart, runEnd := steps[0].Start.Add(-steps[0].At), steps[len(steps)-1].End
	for i, st := range steps {
		faulted += st.End.Sub(st.Start)
		if i+1 < len(steps) {
			quiet += steps[i+1].Start.Sub(st.End)
		}
	}
	quiet += steps[0].Start.Sub(runStart)
	for _, c := range v.Commits {
		if c.Before(runStart) || c.After(runEnd) {
			continue
		}
		if during(steps, c) {
			inFault++
		} else {
			inQuiet++
		}
	}
	if faulted > 0 {
		f.TurnsPerSecFaulted = float64(inFault) / faulted.Seconds()
	}
	if quiet > 0 {
		f.TurnsPerSecQuiet = float64(inQuiet) / quiet.Seconds()
	}
	for _, st := range steps {
		var recovery, stall time.Duration
		for _, sp := range v.Spans {
			if sp.Consumed.IsZero() {
				continue
			}
			if sp.Acked.Before(st.End) && sp.Consumed.After(st.End) {
				recovery = max(recovery, sp.Consumed.Sub(st.End))
			}
			if !sp.Acked.Before(st.Start) && sp.Acked.Before(st.End) {
				stall = max(stall, sp.Consumed.Sub(sp.Acked))
			}
		}
		for _, flt := range st.Faults {
			k := f.ByKind[flt.Kind]
			k.Steps++
			k.Recovery.add(recovery, k.Steps)
			k.Stall.add(stall, k.Steps)
			f.ByKind[flt.Kind] = k
		}
	}
	return f
}

func during(steps []AppliedStep, t time.Time) bool {
	for _, st := range steps {
		if !t.Before(st.Start) && !t.After(st.End) {
			return true
		}
	}
	return false
}

// Markdown renders the report for people: the schedule, the counts the
// checker went through, its verdict and the figures.
func (r *Report) Markdown() string {
	var b strings.Builder
	v := r.Verdict
	fmt.Fprintf(&b, "### Seed %d: %s of faults, %d steps, %d violations\n\n", r.Seed, r.Length, len(r.Steps), len(v.Violations))
	fmt.Fprintf(&b, "- checked: %d sessions, %d acknowledged inputs, %d turns, %d fences, %d tool executions (%d recorded calls), %d model requests (%d recorded), %d processes, %d trigger signals\n",
		v.Sessions, v.Inputs, v.Turns, v.Fences, v.ToolExecutions, v.ToolRecords, v.ModelRequests, v.ModelRecords, v.Processes, v.TriggerSignals)
	fmt.Fprintf(&b, "- runs cut short and taken over: %d; publishes clients sent again after a timeout: %d\n", v.Takeovers, v.ClientRetries)
	fmt.Fprintf(&b, "- calls run again while in doubt: %d; requests delivered after their record, within the grace: %d; process ends told twice (await and notice, ADR 0022): %d\n", v.InDoubtReruns, v.StaleDeliveries, v.ToldTwice)
	fmt.Fprintf(&b, "- turns/s: %.1f while a fault held, %.1f between faults\n", r.Figures.TurnsPerSecFaulted, r.Figures.TurnsPerSecQuiet)
	if len(r.Restarts) > 0 {
		fmt.Fprintf(&b, "- nodes that exited on their own and were started again: %d\n", len(r.Restarts))
	}
	fmt.Fprintf(&b, "\n| fault | steps | heal to full service (mean / max) | longest wait of an input sent during it (mean / max) |\n|---|---|---|---|\n")
	kinds := make([]string, 0, len(r.Figures.ByKind))
	for k := range r.Figures.ByKind {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		kf := r.Figures.ByKind[FaultKind(k)]
		fmt.Fprintf(&b, "| %s | %d | %s / %s | %s / %s |\n", k, kf.Steps, round(kf.Recovery.Mean), round(kf.Recovery.Max), round(kf.Stall.Mean), round(kf.Stall.Max))
	}
	for _, x := range v.Violations {
		fmt.Fprintf(&b, "- VIOLATION: %s\n", x)
	}
	return b.String()
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
