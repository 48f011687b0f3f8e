package lash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lash-run/lash/turn"
)

// Settings are the turn settings that decide what a turn asks of its model
// and tools: the same input replayed under other settings asks for other
// things. Their fingerprint, the sha256 of their JSON, stamps every fence,
// commit and journal record a node writes, and the JSON itself is kept in
// the object store under it, so an operator sees which settings each turn
// ran under (lash-admin settings) and a node tells a turn begun under other
// settings (ADR 0015).
//
// Hooks and a custom backoff are code, which no fingerprint can see: name
// the code that decides them with Label (WithSettingsLabel) and change it
// when they change.
type Settings struct {
	Model           string   `json:"model"`
	System          string   `json:"system"`
	Temperature     *float64 `json:"temperature,omitempty"`
	TopP            *float64 `json:"top_p,omitempty"`
	MaxTokens       int      `json:"max_tokens,omitempty"`
	Stop            []string `json:"stop,omitempty"`
	MaxIterations   int      `json:"max_iterations"`
	TokenBudget     int64    `json:"token_budget"`
	MaxToolFailures int      `json:"max_tool_failures"`
	MaxAttempts     int      `json:"max_attempts"`
	MaxBackoff      string   `json:"max_backoff"`
	DecisionWait    string   `json:"decision_wait"`
	GracePrompt     string   `json:"grace_prompt"`
	Label           string   `json:"label,omitempty"`
	// Hashing is how the machine hashes requests (turn.RequestHashing):
	// journals recorded under another way cannot be replayed by this one.
	Hashing int `json:"hashing,omitempty"`
	// Journal is how the driver journals a turn (JournalVersion).
	Journal int `json:"journal,omitempty"`
	// Agent, Version, Provider and Tools are set for an agent's turns
	// (ADR 0038): the agent's name and version, the provider its model is
	// on, and the only tools its turns are offered (none when empty).
	// Without an agent the node's model and every tool it has.
	Agent    string   `json:"agent,omitempty"`
	Version  string   `json:"version,omitempty"`
	Provider string   `json:"provider,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	// BeforeTool is the agent's hook asked before each tool call.
	BeforeTool string `json:"before_tool,omitempty"`
	AfterTool  string `json:"after_tool,omitempty"`
	// SubAgents and SubAgentDepth are the agents spawn_agent may start
	// from the agent's turns, and how deep.
	SubAgents     []string `json:"sub_agents,omitempty"`
	SubAgentDepth int      `json:"sub_agent_depth,omitempty"`
	// Mode is how the model acts: "" (tools), "both" (tools and
	// run_program) or "code" (run_program alone); ProgramCalls bounds a
	// program's calls (turn.Limits.ProgramCalls).
	Mode         string `json:"mode,omitempty"`
	ProgramCalls int    `json:"program_calls,omitempty"`
}

// WithSettingsLabel names the code behind the machine's hooks and backoff,
// for the settings fingerprint.
func WithSettingsLabel(label string) Option { return func(o *options) { o.settingsLabel = label } }

// SettingsOf describes a machine configuration, defaults filled in.
func SettingsOf(c turn.Config, label string) Settings {
	l := c.Limits
	or := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	backoff := l.MaxBackoff
	if backoff == 0 {
		backoff = turn.DefaultMaxBackoff
	}
	grace := c.GracePrompt
	if grace == "" {
		grace = turn.DefaultGracePrompt
	}
	s := Settings{Model: c.Model, System: c.System, Temperature: c.Sampling.Temperature, TopP: c.Sampling.TopP,
		MaxTokens: c.Sampling.MaxTokens, Stop: c.Sampling.Stop,
		MaxIterations: or(l.MaxIterations, turn.DefaultMaxIterations), TokenBudget: l.TokenBudget,
		MaxToolFailures: l.MaxToolFailures, MaxAttempts: or(l.MaxAttempts, turn.DefaultMaxAttempts),
		MaxBackoff: backoff.String(), DecisionWait: c.DecisionWait.String(), GracePrompt: grace, Label: label,
		Hashing: turn.RequestHashing, Journal: JournalVersion}
	if c.Mode != turn.ModeTools {
		s.Mode, s.ProgramCalls = c.Mode.String(), or(l.ProgramCalls, turn.DefaultProgramCalls)
	}
	return s
}

// Config is the machine configuration the settings describe; hooks and a
// custom backoff cannot be described and are left out.
func (s Settings) Config() (turn.Config, error) {
	if s.Hashing != turn.RequestHashing {
		return turn.Config{}, fmt.Errorf("lash: settings: requests were hashed the way of version %d; this version of lash hashes them the way of version %d", s.Hashing, turn.RequestHashing)
	}
	backoff, err := time.ParseDuration(s.MaxBackoff)
	if err != nil {
		return turn.Config{}, fmt.Errorf("lash: settings: max_backoff: %w", err)
	}
	wait, err := time.ParseDuration(s.DecisionWait)
	if err != nil {
		return turn.Config{}, fmt.Errorf("lash: settings: decision_wait: %w", err)
	}
	mode, err := ParseMode(s.Mode)
	if err != nil {
		return turn.Config{}, fmt.Errorf("lash: settings: %w", err)
	}
	return turn.Config{Model: s.Model, System: s.System, DecisionWait: wait, GracePrompt: s.GracePrompt, Mode: mode,
		Sampling: turn.Sampling{Temperature: s.Temperature, TopP: s.TopP, MaxTokens: s.MaxTokens, Stop: s.Stop},
		Limits: turn.Limits{MaxIterations: s.MaxIterations, TokenBudget: s.TokenBudget, MaxToolFailures: s.MaxToolFailures,
			MaxAttempts: s.MaxAttempts, MaxBackoff: backoff, ProgramCalls: s.ProgramCalls}}, nil
}

// ParseMode reads a mode as settings and flags name it: "tools" (or ""),
// "both" or "code".
func ParseMode(s string) (turn.Mode, error) {
	for _, m := range []turn.Mode{turn.ModeTools, turn.ModeBoth, turn.ModeCode} {
		if s == m.String() {
			return m, nil
		}
	}
	if s == "" {
		return turn.ModeTools, nil
	}
	return 0, fmt.Errorf("%w: mode %q: want tools, both or code", ErrBadInput, s)
}

// nodeSettings are a node's settings, encoded and fingerprinted once.
type nodeSettings struct {
	Settings
	json        []byte
	fingerprint [32]byte
}

func newNodeSettings(s Settings) (nodeSettings, error) {
	data, err := json.Marshal(s)
	if err != nil {
		return nodeSettings{}, err
	}
	return nodeSettings{Settings: s, json: data, fingerprint: sha256.Sum256(data)}, nil
}

// hex is the fingerprint in hex.
func (s nodeSettings) hex() string { return hex.EncodeToString(s.fingerprint[:]) }

// short is the fingerprint as operators read it.
func (s nodeSettings) short() string { return s.hex()[:12] }

// SettingsFingerprint is the hex fingerprint of the node's turn settings.
func (n *Node) SettingsFingerprint() string { return n.settings.hex() }

// LoadSettings reads the settings whose fingerprint (hex, as fences,
// commits and records carry it) is fp, from the object store.
func LoadSettings(ctx context.Context, store interface {
	GetBlob(ctx context.Context, sum [32]byte, limit int64) ([]byte, error)
}, fp string) (Settings, error) {
	var sum [32]byte
	if b, err := hex.DecodeString(fp); err != nil || len(b) != len(sum) {
		return Settings{}, fmt.Errorf("%w: settings fingerprint %q: want 64 hex digits", ErrBadInput, fp)
	} else {
		copy(sum[:], b)
	}
	data, err := store.GetBlob(ctx, sum, 1<<20)
	if err != nil {
		return Settings{}, fmt.Errorf("lash: settings %s: %w", fp[:12], err)
	}
	var s Settings
	if err := json.Unmarshal(data, &s); err != nil {
		return Settings{}, fmt.Errorf("%w: settings %s: %v", ErrBadInput, fp[:12], err)
	}
	return s, nil
}
