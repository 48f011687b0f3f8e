package cli

import (
	"flag"
	"fmt"
	"time"

	"github.com/lash-run/lash/turn"
)

// Machine is the turn machine's configuration. Every node of a deployment
// must use the same, and lash-admin verify replays with it.
type Machine struct {
	ModelName       string
	System          string
	MaxIterations   int
	TokenBudget     int64
	MaxToolFailures int
	DecisionWait    time.Duration
	// Mode is how the model acts: tools, both or code (turn.Mode).
	Mode string
}

// Register defines the machine flags on fs.
func (m *Machine) Register(fs *flag.FlagSet) {
	fs.StringVar(&m.ModelName, "model", "", "model `name` sent to the provider (required for an OpenAI-compatible API; default \"scripted\" with --script)")
	fs.StringVar(&m.System, "system", "You are a helpful assistant.", "system `prompt`")
	fs.IntVar(&m.MaxIterations, "max-iterations", turn.DefaultMaxIterations, "model `calls` per turn before the final answer is asked for")
	fs.Int64Var(&m.TokenBudget, "token-budget", 0, "`tokens` per turn before it stops (0: no budget)")
	fs.IntVar(&m.MaxToolFailures, "max-tool-failures", 0, "failed tool `calls` in a row before the turn stops (0: no limit)")
	fs.DurationVar(&m.DecisionWait, "decision-wait", 0, "how long a turn whose calls all wait for decisions stays parked before it ends suspended")
	fs.StringVar(&m.Mode, "mode", "tools", "how the model acts: `tools` (tool calls), code (programs that call the tools: run_program alone) or both")
}

// mode is the Mode flag as the machine takes it.
func (m *Machine) mode() (turn.Mode, bool) {
	for _, mode := range []turn.Mode{turn.ModeTools, turn.ModeBoth, turn.ModeCode} {
		if m.Mode == mode.String() {
			return mode, true
		}
	}
	return turn.ModeTools, m.Mode == ""
}

// Validate checks the settings.
func (m *Machine) Validate() error {
	switch {
	case m.MaxIterations <= 0:
		return fmt.Errorf("%w: --max-iterations must be positive", ErrUsage)
	case m.TokenBudget < 0 || m.MaxToolFailures < 0 || m.DecisionWait < 0:
		return fmt.Errorf("%w: --token-budget, --max-tool-failures and --decision-wait cannot be negative", ErrUsage)
	}
	if _, ok := m.mode(); !ok {
		return fmt.Errorf("%w: --mode %q: want tools, code or both", ErrUsage, m.Mode)
	}
	return nil
}

// Config is the machine's configuration.
func (m *Machine) Config() turn.Config {
	mode, _ := m.mode()
	return turn.Config{Model: m.ModelName, System: m.System, DecisionWait: m.DecisionWait, Mode: mode,
		Limits: turn.Limits{MaxIterations: m.MaxIterations, TokenBudget: m.TokenBudget, MaxToolFailures: m.MaxToolFailures}}
}
