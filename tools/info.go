package tools

import (
	"context"

	"github.com/lash-run/lash/turn"
)

// CallInfo describes the run of one call. The Runner puts it in the context
// it passes to Tool.Call; read it with Info.
type CallInfo struct {
	// Key is the call's replay key. It is the same on every attempt, on every
	// worker, so it serves as the idempotency key of the call's side effects.
	Key turn.ReplayKey
	// Attempt is 1 when no earlier run of this call can have started, and
	// more when one may have (InDoubt is then set).
	Attempt int
	// InDoubt is set when an earlier attempt may have run, in part or in
	// full, without its outcome being recorded (a worker died mid-call, or
	// right before it). A tool with side effects checks, by Key, whether
	// they already happened.
	InDoubt bool
	// Decision is set when a decision resumed a suspended call; in
	// ResumePassToTool mode the tool reads its Payload. It is a copy.
	Decision *turn.Decision
}

// IdempotencyKey is Key as text, for APIs that take an idempotency key.
func (c CallInfo) IdempotencyKey() string { return c.Key.String() }

type infoKey struct{}

// NewContext returns a context carrying info, for running a tool outside a
// Runner (in its own tests, say).
func NewContext(ctx context.Context, info CallInfo) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// Info returns the CallInfo the context carries.
func Info(ctx context.Context) (CallInfo, bool) {
	info, ok := ctx.Value(infoKey{}).(CallInfo)
	return info, ok
}

// AgentPolicy is what a turn's agent lets spawn_agent start: sub-agents
// under the agent itself, or under the agents it names, nested at most
// MaxDepth deep (0: the runtime's own bound).
type AgentPolicy struct {
	// Agent is the calling session's agent ("" for the default agent).
	Agent     string
	SubAgents []string
	MaxDepth  int
}

type policyKey struct{}

// WithAgentPolicy returns a context carrying the calling turn's agent
// policy.
func WithAgentPolicy(ctx context.Context, p AgentPolicy) context.Context {
	return context.WithValue(ctx, policyKey{}, p)
}

// AgentPolicyOf is the calling turn's agent policy (the zero policy: the
// default agent's).
func AgentPolicyOf(ctx context.Context) AgentPolicy {
	p, _ := ctx.Value(policyKey{}).(AgentPolicy)
	return p
}

type offeredKey struct{}

// WithOffered returns a context saying which tools the calling turn was
// offered: its agent's allowlist. A tool that hands tools on (spawn_agent)
// gives none beyond them.
func WithOffered(ctx context.Context, names []string) context.Context {
	return context.WithValue(ctx, offeredKey{}, names)
}

// Offered returns the tools the calling turn was offered, when its agent
// limits them (ok false: every tool of the node).
func Offered(ctx context.Context) (names []string, ok bool) {
	names, ok = ctx.Value(offeredKey{}).([]string)
	return names, ok
}
