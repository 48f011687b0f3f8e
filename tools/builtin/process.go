package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// The process tools' names.
const (
	ProcessStartTool  = "process_start"
	ProcessAwaitTool  = "process_await"
	ProcessCancelTool = "process_cancel"
	ProcessListTool   = "process_list"
	SpawnAgentTool    = "spawn_agent"
)

// MaxAgentDepth is how deep sub-agents nest: a session at this depth is
// not offered spawn_agent.
const MaxAgentDepth = 3

// ProcessTicket parks a process_await call: "process <pid>".
const ProcessTicket = "process"

// Processes is what the process tools need of the deployment's process
// registry (*processes.Registry is one).
type Processes interface {
	Register(ctx context.Context, id string, reg processes.Registration) (*processes.Process, bool, error)
	Get(ctx context.Context, id string) (*processes.Process, error)
	RequestCancel(ctx context.Context, id, reason string) (*processes.Event, error)
	Reserve(ctx context.Context, tree, session, pid string, b processes.Budget) error
}

// ProcessID names the process a call starts: derived from the call's
// replay key, so a replayed or repeated call names the same process and
// its registration is a no-op.
func ProcessID(info tools.CallInfo) string {
	sum := sha256.Sum256([]byte(info.Key.String()))
	return "p-" + hex.EncodeToString(sum[:12])
}

// NamedProcessID names the process a session started under a name of its
// choosing: the same name in the same session is the same process.
func NamedProcessID(session, name string) string {
	sum := sha256.Sum256([]byte("name\x00" + session + "\x00" + name))
	return "p-" + hex.EncodeToString(sum[:12])
}

// IsProcessID reports whether id has the form of the ids ProcessID and
// NamedProcessID make: a sub-agent's session is named by its process's id.
func IsProcessID(id string) bool {
	if len(id) != 26 || id[:2] != "p-" {
		return false
	}
	_, err := hex.DecodeString(id[2:])
	return err == nil
}

// AgentOf returns the sub-agent registration of session: the process whose
// child session it is, or nil for a session no process spawned.
func AgentOf(ctx context.Context, ps Processes, session string) (*processes.Process, error) {
	if !IsProcessID(session) {
		return nil, nil
	}
	p, err := ps.Get(ctx, session)
	if errors.Is(err, processes.ErrUnknown) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if in := p.Registration.Input; in.Kind != processes.SessionTurn || in.Session != session {
		return nil, nil
	}
	return p, nil
}

// maxProcessName bounds a process's name in its session.
const maxProcessName = 128

// Lister lists the processes a session holds a grant on.
type Lister func(ctx context.Context, session string) ([]*processes.Process, error)

// ProcessTools returns process_start, process_await, process_cancel,
// spawn_agent, and process_list when list is not nil. has reports whether
// a tool may be run in the background (nil: any). budget bounds the
// sub-agents of each tree (a turn of a top-level session, and every
// sub-agent under it): a spawn past it is refused, and the model reads
// why.
func ProcessTools(ps Processes, has func(tool string) bool, list Lister, budget processes.Budget) []tools.Tool {
	start, err := tools.Func(ProcessStartTool, "Run a tool in the background. Returns at once with the process id; when the process ends, its outcome comes back as a new message. Use process_await to wait for it instead.",
		func(ctx context.Context, a struct {
			Tool  string         `json:"tool" jsonschema:"the tool to run"`
			Args  map[string]any `json:"args,omitempty" jsonschema:"the tool's arguments, as it takes them"`
			Name  string         `json:"name,omitempty" jsonschema:"a name for the process, unique in this conversation, to refer to it by; starting the same name with the same tool and arguments again refers to the same process"`
			Label string         `json:"label,omitempty" jsonschema:"a short description, for people watching"`
		}) (string, error) {
			info, ok := tools.Info(ctx)
			if !ok {
				return "", errors.New("process_start runs inside a turn")
			}
			if has != nil && !has(a.Tool) || isProcessTool(a.Tool) {
				return "", fmt.Errorf("no tool %q can run in the background", a.Tool)
			}
			if agent, err := AgentOf(ctx, ps, info.Key.Session); err != nil {
				return "", err
			} else if agent != nil && agent.Registration.Input.Tools != nil && !slices.Contains(agent.Registration.Input.Tools, a.Tool) {
				return "", fmt.Errorf("no tool %q can run in the background", a.Tool)
			}
			if offered, limited := tools.Offered(ctx); limited && !slices.Contains(offered, a.Tool) {
				return "", fmt.Errorf("no tool %q can run in the background: it is not yours", a.Tool)
			}
			args := json.RawMessage(`{}`)
			if len(a.Args) > 0 {
				var err error
				if args, err = json.Marshal(a.Args); err != nil {
					return "", err
				}
			}
			k := info.Key
			reg := processes.Registration{
				Input:       processes.Input{Kind: processes.ToolCall, Tool: a.Tool, Args: args},
				Disposition: processes.Rerunnable,
				Provenance:  processes.Provenance{Session: k.Session, Turn: k.Turn, Effect: uint64(k.Effect), Call: k.Call},
				WakeTarget:  k.Session,
				Label:       a.Label,
			}
			id := ProcessID(info)
			if a.Name != "" {
				if len(a.Name) > maxProcessName {
					return "", fmt.Errorf("name of %d bytes, at most %d", len(a.Name), maxProcessName)
				}
				id = NamedProcessID(k.Session, a.Name)
			}
			_, _, err := ps.Register(ctx, id, reg)
			if errors.Is(err, processes.ErrConflict) {
				// Started under this name by an earlier call: the same
				// work is the same process.
				p, gerr := ps.Get(ctx, id)
				if gerr != nil {
					return "", gerr
				}
				if p.Registration.Input.Tool != a.Tool || !sameJSON(p.Registration.Input.Args, args) {
					return "", fmt.Errorf("a process named %q was started with another tool or other arguments", a.Name)
				}
				return fmt.Sprintf(`{"process":%q,"status":%q}`, id, p.Status()), nil
			}
			if err != nil {
				return "", err
			}
			return fmt.Sprintf(`{"process":%q,"status":"started"}`, id), nil
		})
	if err != nil {
		panic(err)
	}
	await, err := tools.Func(ProcessAwaitTool, "Wait until a background process ends and return its outcome. The wait survives restarts and holds nothing while it lasts.",
		func(ctx context.Context, a struct {
			Process string `json:"process" jsonschema:"the process id process_start returned, or the name it was given"`
		}) (string, error) {
			if info, ok := tools.Info(ctx); ok && info.Decision != nil {
				return info.Decision.Payload, nil
			}
			p, err := addressable(ctx, ps, a.Process)
			if err != nil {
				return "", err
			}
			if p.Ended() {
				return ProcessOutcome(p), nil
			}
			return "", tools.Pending(ProcessTicket + " " + p.ID)
		})
	if err != nil {
		panic(err)
	}
	cancel, err := tools.Func(ProcessCancelTool, "Ask a background process to stop. Its end comes back like any other.",
		func(ctx context.Context, a struct {
			Process string `json:"process" jsonschema:"the process id process_start returned, or the name it was given"`
			Reason  string `json:"reason,omitempty" jsonschema:"why, for people watching"`
		}) (string, error) {
			p, err := addressable(ctx, ps, a.Process)
			if err != nil {
				return "", err
			}
			if p.Ended() {
				return "it had ended: " + ProcessOutcome(p), nil
			}
			if _, err := ps.RequestCancel(ctx, p.ID, a.Reason); err != nil {
				return "", err
			}
			return "cancel requested", nil
		})
	if err != nil {
		panic(err)
	}
	spawn, err := tools.Func(SpawnAgentTool, "Start a sub-agent on a task, in a conversation of its own, in the background. Returns at once with its process id; its final answer comes back as a new message, or use process_await to wait for it.",
		func(ctx context.Context, a struct {
			Task  string   `json:"task" jsonschema:"what the sub-agent is to do, with everything it needs to know"`
			Tools []string `json:"tools,omitempty" jsonschema:"the tools it may use; all of yours if left out"`
			Name  string   `json:"name,omitempty" jsonschema:"a name for it, unique in this conversation, to refer to it by"`
			Agent string   `json:"agent,omitempty" jsonschema:"the agent to run it, one your definition lets you start; yours if left out"`
		}) (string, error) {
			info, ok := tools.Info(ctx)
			if !ok {
				return "", errors.New("spawn_agent runs inside a turn")
			}
			if a.Task == "" {
				return "", errors.New("task is empty")
			}
			k := info.Key
			depth := 1
			parent, err := AgentOf(ctx, ps, k.Session)
			if err != nil {
				return "", err
			}
			offered, limited := tools.Offered(ctx)
			if parent != nil {
				depth = parent.Registration.Input.Depth + 1
				if a.Tools == nil {
					a.Tools = parent.Registration.Input.Tools // never more than its own
				}
			} else if limited && a.Tools == nil {
				// An agent's allowlist, as far as the node serves it: never more.
				a.Tools = []string{}
				for _, t := range offered {
					if has == nil || has(t) {
						a.Tools = append(a.Tools, t)
					}
				}
			}
			if depth > MaxAgentDepth {
				return "", fmt.Errorf("sub-agents nest at most %d deep", MaxAgentDepth)
			}
			// A sub-agent runs under the caller's agent, or under one the
			// caller's definition names, as deep as it allows.
			pol := tools.AgentPolicyOf(ctx)
			agent := pol.Agent
			if a.Agent != "" && a.Agent != agents.Name(pol.Agent) {
				if !slices.Contains(pol.SubAgents, a.Agent) {
					return "", fmt.Errorf("agent %q is not one you may start (your definition's sub_agents.agents: %q)", a.Agent, pol.SubAgents)
				}
				agent = a.Agent
			}
			if pol.MaxDepth > 0 && depth > pol.MaxDepth {
				return "", fmt.Errorf("your sub-agents nest at most %d deep", pol.MaxDepth)
			}
			for _, t := range a.Tools {
				if has != nil && !has(t) {
					return "", fmt.Errorf("no tool %q", t)
				}
				if parent != nil && parent.Registration.Input.Tools != nil && !slices.Contains(parent.Registration.Input.Tools, t) ||
					limited && !slices.Contains(offered, t) {
					return "", fmt.Errorf("tool %q is not yours to give", t)
				}
			}
			id := ProcessID(info)
			if a.Name != "" {
				if len(a.Name) > maxProcessName {
					return "", fmt.Errorf("name of %d bytes, at most %d", len(a.Name), maxProcessName)
				}
				id = NamedProcessID(k.Session, a.Name)
			}
			// The tree is the top-level turn's: a sub-agent's children are
			// counted in its parent's tree.
			tree := processes.TreeID(k.Session, k.Turn)
			if parent != nil && parent.Registration.Input.Tree != "" {
				tree = parent.Registration.Input.Tree
			}
			if existing, err := ps.Get(ctx, id); err == nil {
				// Started under this name before: the same sub-agent (checked
				// below), which takes no new place.
				if in := existing.Registration.Input; in.Instructions != a.Task || in.Agent != agent || !slices.Equal(in.Tools, a.Tools) || (in.Tools == nil) != (a.Tools == nil) {
					return "", fmt.Errorf("a sub-agent named %q was started on another task or with other tools", a.Name)
				}
				return fmt.Sprintf(`{"process":%q,"status":%q}`, id, existing.Status()), nil
			} else if !errors.Is(err, processes.ErrUnknown) {
				return "", err
			}
			if err := ps.Reserve(ctx, tree, k.Session, id, budget); err != nil {
				return "", err
			}
			reg := processes.Registration{
				Input:       processes.Input{Kind: processes.SessionTurn, Session: id, Instructions: a.Task, Tools: a.Tools, Depth: depth, Tree: tree, Agent: agent},
				Disposition: processes.Rerunnable,
				Provenance:  processes.Provenance{Session: k.Session, Turn: k.Turn, Effect: uint64(k.Effect), Call: k.Call},
				WakeTarget:  k.Session,
				Label:       a.Name,
			}
			_, _, err = ps.Register(ctx, id, reg)
			if errors.Is(err, processes.ErrConflict) {
				// Started under this name by an earlier call: the same task
				// with the same tools is the same sub-agent.
				p, gerr := ps.Get(ctx, id)
				if gerr != nil {
					return "", gerr
				}
				if in := p.Registration.Input; in.Instructions != a.Task || in.Agent != agent || !slices.Equal(in.Tools, a.Tools) || (in.Tools == nil) != (a.Tools == nil) {
					return "", fmt.Errorf("a sub-agent named %q was started on another task or with other tools", a.Name)
				}
				return fmt.Sprintf(`{"process":%q,"status":%q}`, id, p.Status()), nil
			}
			if err != nil {
				return "", err
			}
			return fmt.Sprintf(`{"process":%q,"status":"started"}`, id), nil
		})
	if err != nil {
		panic(err)
	}
	out := []tools.Tool{start, await, cancel, spawn}
	if list != nil {
		lt, err := tools.Func(ProcessListTool, "List the background processes and sub-agents of this conversation: id, what runs, status, and the outcome of those that ended.",
			func(ctx context.Context, _ struct{}) (string, error) {
				info, ok := tools.Info(ctx)
				if !ok {
					return "", errors.New("process_list runs inside a turn")
				}
				ps, err := list(ctx, info.Key.Session)
				if err != nil {
					return "", err
				}
				type row struct {
					Process string `json:"process"`
					Label   string `json:"label,omitempty"`
					Kind    string `json:"kind"`
					Status  string `json:"status"`
					Outcome string `json:"outcome,omitempty"`
				}
				rows := []row{}
				for _, p := range ps {
					r := row{Process: p.ID, Label: p.Registration.Label, Kind: string(p.Registration.Input.Kind), Status: string(p.Status())}
					if p.Ended() {
						r.Outcome = clipOutcome(ProcessOutcome(p))
					}
					rows = append(rows, r)
				}
				b, err := json.Marshal(rows)
				return string(b), err
			})
		if err != nil {
			panic(err)
		}
		out = append(out, lt)
	}
	return out
}

// clipOutcome keeps a listing short: process_await gives the whole outcome.
func clipOutcome(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:200] + "..."
}

// AgentTools filters the tool specs offered to a sub-agent's session: the
// tools its process allows, and no spawn_agent at the depth limit.
func AgentTools(agent *processes.Process, specs []turn.ToolSpec) []turn.ToolSpec {
	in := agent.Registration.Input
	out := specs[:0:0]
	for _, s := range specs {
		switch {
		case s.Name == SpawnAgentTool && in.Depth >= MaxAgentDepth:
		case in.Tools != nil && !slices.Contains(in.Tools, s.Name) && !isProcessTool(s.Name):
		default:
			out = append(out, s)
		}
	}
	return out
}

func isProcessTool(name string) bool {
	switch name {
	case ProcessStartTool, ProcessAwaitTool, ProcessCancelTool, ProcessListTool, SpawnAgentTool:
		return true
	}
	return false
}

// addressable returns the process if the calling session may address it:
// it holds a grant (the session that started a process and its wake
// target do, until revoked).
func addressable(ctx context.Context, ps Processes, id string) (*processes.Process, error) {
	info, ok := tools.Info(ctx)
	if !ok {
		return nil, errors.New("process tools run inside a turn")
	}
	p, err := ps.Get(ctx, id)
	if errors.Is(err, processes.ErrUnknown) || errors.Is(err, processes.ErrInvalid) {
		// Not an id: a name the session gave.
		p, err = ps.Get(ctx, NamedProcessID(info.Key.Session, id))
	}
	if errors.Is(err, processes.ErrUnknown) || errors.Is(err, processes.ErrInvalid) {
		return nil, fmt.Errorf("no process %q", id)
	}
	if err != nil {
		return nil, err
	}
	if !p.Granted(info.Key.Session) {
		return nil, fmt.Errorf("no process %q", id) // not said to exist to those it is not theirs
	}
	return p, nil
}

// ProcessOutcome is an ended process's outcome as the model reads it.
func ProcessOutcome(p *processes.Process) string {
	if p.End == nil {
		return "still running"
	}
	d := p.End.Data
	switch p.End.Type {
	case processes.TypeCompleted:
		var s string
		if json.Unmarshal(d, &s) == nil {
			return s
		}
		return string(d)
	case processes.TypeFailed:
		var f processes.Failure
		_ = json.Unmarshal(d, &f)
		return fmt.Sprintf("failed (%s): %s", f.Code, f.Message)
	case processes.TypeCancelled:
		var r processes.Request
		_ = json.Unmarshal(d, &r)
		return "cancelled: " + r.Reason
	case processes.TypeAbandoned:
		var a processes.Abandonment
		_ = json.Unmarshal(d, &a)
		return fmt.Sprintf("abandoned, outcome unknown (%s: %s)", a.Writer, a.Evidence)
	}
	return p.End.Type
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return string(ca) == string(cb)
}
