package agents

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/lash-run/lash/tools"
)

// ErrInvalid refuses a definition: the error says which field and why.
var ErrInvalid = errors.New("agents: invalid definition")

// Providers are the model providers a definition may name.
var Providers = []string{"openai", "anthropic"}

// Bounds of a definition, so none can make a record the stream refuses or
// a request no provider takes.
const (
	MaxNameBytes        = 64
	MaxDefinitionBytes  = 128 << 10 // encoded
	MaxDescriptionBytes = 1024
	MaxLabels           = 32
	MaxLabelKeyBytes    = 63
	MaxLabelValueBytes  = 256
	MaxTools            = 256
	MaxStop             = 4
	MaxModelBytes       = 256
	MaxSubAgents        = 64
	// MaxSubAgentDepth is spawn_agent's own bound (ADR 0035): a definition
	// may ask for less.
	MaxSubAgentDepth = 3
)

// Definition is an agent as operators write it: what a session bound to it
// asks of its model and which tools it may use. Its Version is the sha256
// of its canonical JSON, so the same definition is one version however it
// was spelled.
type Definition struct {
	Name         string            `json:"name" yaml:"name"`
	Description  string            `json:"description,omitempty" yaml:"description,omitempty"`
	Labels       map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Instructions string            `json:"instructions" yaml:"instructions,omitempty"`
	// Provider is the model API: "openai" (Chat Completions and those
	// compatible with it) or "anthropic" (the Messages API).
	Provider   string     `json:"provider" yaml:"provider,omitempty"`
	Model      string     `json:"model" yaml:"model,omitempty"`
	Parameters Parameters `json:"parameters,omitzero" yaml:"parameters,omitempty"`
	// Tools are the only tools its turns are offered, built-ins included,
	// by name; none when empty.
	Tools []string `json:"tools,omitempty" yaml:"tools,omitempty"`
	// Mode is how its model acts: "tools" (the default: tool calls),
	// "code" (programs that call the tools, through run_program alone) or
	// "both".
	Mode      string    `json:"mode,omitempty" yaml:"mode,omitempty"`
	Limits    Limits    `json:"limits,omitzero" yaml:"limits,omitempty"`
	SubAgents SubAgents `json:"sub_agents,omitzero" yaml:"sub_agents,omitempty"`
	Hooks     Hooks     `json:"hooks,omitzero" yaml:"hooks,omitempty"`
}

// Hooks name NATS endpoints (<prefix>.hook.<name>) asked at points of the
// agent's turns; their answers are journaled with what they decided.
type Hooks struct {
	// BeforeTool is asked before each tool call runs: it allows the call,
	// blocks it with a reason the model reads, or suspends it for a
	// person's decision.
	BeforeTool string `json:"before_tool,omitempty" yaml:"before_tool,omitempty"`
	// AfterTool is asked with each call's result before the model reads
	// it: it allows it, or withholds it with a reason.
	AfterTool string `json:"after_tool,omitempty" yaml:"after_tool,omitempty"`
}

// Parameters are the model's sampling parameters; unset ones are the
// provider's defaults.
type Parameters struct {
	Temperature *float64 `json:"temperature,omitempty" yaml:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty" yaml:"top_p,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty" yaml:"max_tokens,omitempty"`
	Stop        []string `json:"stop,omitempty" yaml:"stop,omitempty"`
}

// Limits bound each turn; zero is the deployment's default.
type Limits struct {
	MaxIterations   int   `json:"max_iterations,omitempty" yaml:"max_iterations,omitempty"`
	TokenBudget     int64 `json:"token_budget,omitempty" yaml:"token_budget,omitempty"`
	MaxToolFailures int   `json:"max_tool_failures,omitempty" yaml:"max_tool_failures,omitempty"`
	// DecisionWait is how long a call waits for an approval before it
	// parks, as Go writes a duration ("30s", "10m").
	DecisionWait string `json:"decision_wait,omitempty" yaml:"decision_wait,omitempty"`
	// ProgramCalls bounds the calls one program makes, in code and both
	// modes (1 to 1000).
	ProgramCalls int `json:"program_calls,omitempty" yaml:"program_calls,omitempty"`
}

// Modes are the modes a definition may name.
var Modes = []string{"tools", "code", "both"}

// MaxProgramCalls bounds Limits.ProgramCalls: the program's own bound.
const MaxProgramCalls = 1000

// SubAgents is what spawn_agent may start from a session of the agent.
type SubAgents struct {
	// Agents are the agents it may start; none when empty.
	Agents   []string `json:"agents,omitempty" yaml:"agents,omitempty"`
	MaxDepth int      `json:"max_depth,omitempty" yaml:"max_depth,omitempty"`
}

// Parse reads the definitions in a file: YAML (one or more documents) or
// JSON. A field it does not know is an error, with its line.
func Parse(data []byte) ([]*Definition, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []*Definition
	for i := 1; ; i++ {
		var d Definition
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %s", ErrInvalid, i, yamlError(err))
		}
		out = append(out, &d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no definition in the file", ErrInvalid)
	}
	return out, nil
}

// yamlError words the decoder's errors for people, without Go's names.
func yamlError(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:\n  ")
	for _, t := range []string{"agents.Definition", "agents.Parameters", "agents.Limits", "agents.SubAgents", "agents.Hooks"} {
		s = strings.ReplaceAll(s, " in type "+t, "")
	}
	return strings.ReplaceAll(s, "\n  ", "; ")
}

// Check reports what is wrong with d, or nil. known says whether a tool
// name is one the deployment has (nil: any well-formed name).
func (d *Definition) Check(known func(tool string) bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: agent %q: %s", ErrInvalid, clip(d.Name), fmt.Sprintf(format, args...))
	}
	if err := CheckName(d.Name); err != nil {
		return err
	}
	switch {
	case !utf8.ValidString(d.Instructions + d.Description + d.Model):
		return bad("text that is not UTF-8")
	case len(d.Description) > MaxDescriptionBytes:
		return bad("description of %d bytes, at most %d", len(d.Description), MaxDescriptionBytes)
	case !slices.Contains(Providers, d.Provider):
		return bad("provider %q: one of %s", clip(d.Provider), strings.Join(Providers, ", "))
	case d.Model == "" || len(d.Model) > MaxModelBytes:
		return bad("model: 1 to %d bytes", MaxModelBytes)
	case len(d.Tools) > MaxTools:
		return bad("%d tools, at most %d", len(d.Tools), MaxTools)
	case len(d.Parameters.Stop) > MaxStop:
		return bad("%d stop sequences, at most %d", len(d.Parameters.Stop), MaxStop)
	case d.Parameters.MaxTokens < 0:
		return bad("parameters.max_tokens is negative")
	case d.Parameters.Temperature != nil && !(*d.Parameters.Temperature >= 0 && *d.Parameters.Temperature <= 2):
		return bad("parameters.temperature: 0 to 2") // NaN too
	case d.Parameters.TopP != nil && !(*d.Parameters.TopP >= 0 && *d.Parameters.TopP <= 1):
		return bad("parameters.top_p: 0 to 1")
	case d.Limits.MaxIterations < 0 || d.Limits.TokenBudget < 0 || d.Limits.MaxToolFailures < 0:
		return bad("limits are zero (the default) or positive")
	case d.Mode != "" && !slices.Contains(Modes, d.Mode):
		return bad("mode %q: one of %s", clip(d.Mode), strings.Join(Modes, ", "))
	case d.Limits.ProgramCalls < 0 || d.Limits.ProgramCalls > MaxProgramCalls:
		return bad("limits.program_calls: 0 (the default) to %d", MaxProgramCalls)
	case d.SubAgents.MaxDepth < 0 || d.SubAgents.MaxDepth > MaxSubAgentDepth:
		return bad("sub_agents.max_depth: 0 to %d", MaxSubAgentDepth)
	case len(d.SubAgents.Agents) > MaxSubAgents:
		return bad("%d sub-agents, at most %d", len(d.SubAgents.Agents), MaxSubAgents)
	}
	if err := CheckLabels(d.Labels, MaxLabels); err != nil {
		return bad("%v", err)
	}
	if d.Limits.DecisionWait != "" {
		if w, err := time.ParseDuration(d.Limits.DecisionWait); err != nil || w < 0 {
			return bad("limits.decision_wait %q: a duration such as 30s or 10m", clip(d.Limits.DecisionWait))
		}
	}
	for _, t := range d.Tools {
		if err := tools.CheckName(t); err != nil {
			return bad("tool %q: %v", clip(t), err)
		}
		if known != nil && !known(t) {
			return bad("tool %q: no such tool on the deployment", t)
		}
	}
	for field, h := range map[string]string{"before_tool": d.Hooks.BeforeTool, "after_tool": d.Hooks.AfterTool} {
		if h == "" {
			continue
		}
		if err := tools.CheckName(h); err != nil {
			return bad("hooks.%s %q: %v", field, clip(h), err)
		}
	}
	for _, a := range d.SubAgents.Agents {
		if err := CheckName(a); err != nil {
			return bad("sub-agent: %v", err)
		}
	}
	if len(d.SubAgents.Agents) > 0 && d.SubAgents.MaxDepth == 0 {
		return bad("sub_agents.agents needs sub_agents.max_depth")
	}
	b, err := d.canonical()
	if err != nil {
		return bad("%v", err)
	}
	if len(b) > MaxDefinitionBytes {
		return bad("%d bytes encoded, at most %d", len(b), MaxDefinitionBytes)
	}
	return nil
}

// CheckName reports why name cannot name an agent: 1 to 64 letters,
// digits, '_' and '-' (so it is its own subject token).
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("%w: agent name %q: 1 to %d bytes", ErrInvalid, clip(name), MaxNameBytes)
	}
	// The rule of tool names, which is the rule of a plain subject token.
	if err := tools.CheckName(name); err != nil {
		return fmt.Errorf("%w: agent name: %v", ErrInvalid, strings.TrimPrefix(err.Error(), tools.ErrInvalidName.Error()+": "))
	}
	return nil
}

// CheckRef reports why ref cannot name an agent or one of its revisions:
// "name", "name@N" (N from 1) or "name@<version prefix>" (8 to 64 hex
// digits). It returns the agent's name.
func CheckRef(ref string) (string, error) {
	name, rev, pinned := strings.Cut(ref, "@")
	if err := CheckName(name); err != nil {
		return name, err
	}
	if !pinned {
		return name, nil
	}
	if n, err := strconv.Atoi(rev); err == nil && n > 0 && len(rev) <= 10 {
		return name, nil
	}
	if len(rev) < 8 || len(rev) > 64 || strings.Trim(rev, "0123456789abcdef") != "" {
		return name, fmt.Errorf("%w: %q: after @ a revision number or 8 to 64 hex digits of a version", ErrInvalid, clip(ref))
	}
	return name, nil
}

// CheckLabels reports what is wrong with labels: at most most of them,
// keys of 1 to 63 letters, digits, '_', '-', '.' and '/', values of at
// most 256 bytes of UTF-8. Sessions' labels follow the same rules.
func CheckLabels(labels map[string]string, most int) error {
	if len(labels) > most {
		return fmt.Errorf("%d labels, at most %d", len(labels), most)
	}
	for k, v := range labels {
		if err := labelKey(k); err != nil {
			return err
		}
		if len(v) > MaxLabelValueBytes || !utf8.ValidString(v) {
			return fmt.Errorf("label %q: a value of at most %d bytes of UTF-8", k, MaxLabelValueBytes)
		}
	}
	return nil
}

func labelKey(k string) error {
	if k == "" || len(k) > MaxLabelKeyBytes {
		return fmt.Errorf("label key %q: 1 to %d bytes", clip(k), MaxLabelKeyBytes)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/') {
			return fmt.Errorf("label key %q has %q at byte %d; use letters, digits, '_', '-', '.' or '/'", clip(k), c, i)
		}
	}
	return nil
}

// normalized is d as it is stored: tool and sub-agent lists sorted and
// without repeats, so their order makes no new version.
func (d *Definition) normalized() *Definition {
	n := *d
	n.Tools = sortedSet(d.Tools)
	n.SubAgents.Agents = sortedSet(d.SubAgents.Agents)
	if len(d.Labels) == 0 {
		n.Labels = nil
	}
	if len(d.Parameters.Stop) == 0 {
		n.Parameters.Stop = nil
	}
	return &n
}

func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// canonical is the JSON a version is the hash of (object keys in a fixed
// order: struct fields, and map keys sorted by encoding/json).
func (d *Definition) canonical() ([]byte, error) {
	return json.Marshal(d.normalized())
}

// Version is the content address of d: the hex sha256 of its canonical
// JSON.
func (d *Definition) Version() string {
	b, err := d.canonical()
	if err != nil {
		panic(fmt.Sprintf("agents: encoding a definition: %v", err)) // only strings, numbers and maps of strings
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}

// YAML is d as stored, written as a definition file.
func (d *Definition) YAML() string {
	b, err := yaml.Marshal(d.normalized())
	if err != nil {
		panic(fmt.Sprintf("agents: encoding a definition: %v", err))
	}
	return string(b)
}
