package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Reports are the runs of one long run, as kept in the repository
// (docs/chaos/report.json) and quoted by the README.
type Reports struct {
	// At is when the long run ended.
	At   time.Time `json:"at"`
	Runs []*Report `json:"runs"`
}

// Totals are the figures the README quotes.
type Totals struct {
	Scenarios  int
	Faults     int
	Operations int
	Violations int
	Length     time.Duration
}

// Totals sums the runs.
func (rs *Reports) Totals() Totals {
	var t Totals
	for _, r := range rs.Runs {
		t.Scenarios++
		t.Length += r.Length
		for _, st := range r.Steps {
			t.Faults += len(st.Faults)
		}
		v := r.Verdict
		t.Operations += v.Inputs + v.Turns + v.ToolExecutions + v.ModelRequests + v.Processes + v.TriggerSignals
		t.Violations += len(v.Violations)
	}
	return t
}

// Quote is the README's sentence on the latest long run.
func (t Totals) Quote() string {
	return fmt.Sprintf("The latest long run: %d scenarios (seeds) over %s of faults, %d faults injected, %d operations checked (acknowledged inputs, turns, tool executions, model requests, processes, trigger signals), violations: %d.",
		t.Scenarios, t.Length.Round(time.Minute), t.Faults, t.Operations, t.Violations)
}

// Write keeps the reports in dir: report.json, and report.md for people.
func (rs *Reports) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rs, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Chaos report\n\nWritten by `LASH_CHAOS=%s LASH_CHAOS_REPORT=../docs/chaos go test ./chaos -run TestChaosLong -timeout 0 -v` at %s.\n\n%s\n\n",
		rs.Totals().Length.Round(time.Minute), rs.At.Format(time.RFC3339), rs.Totals().Quote())
	for _, r := range rs.Runs {
		b.WriteString(r.Markdown())
		b.WriteString("\n<details><summary>schedule</summary>\n\n")
		for _, st := range r.Steps {
			fmt.Fprintf(&b, "- %s\n", st.Step)
		}
		b.WriteString("\n</details>\n\n")
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// ReadReports reads what Write kept in dir.
func ReadReports(dir string) (*Reports, error) {
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return nil, err
	}
	var rs Reports
	if err := json.Unmarshal(data, &rs); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &rs, nil
}
