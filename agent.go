package lash

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
)

// WithProviders are the model providers the node runs agents on, by the
// name agent definitions give them ("openai", "anthropic"). A session
// bound to an agent whose provider the node lacks is left to a live node
// that has it, and failed when none has (ADR 0038).
func WithProviders(p map[string]Model) Option { return func(o *options) { o.providers = p } }

// A profile is what one turn runs under: its settings, which stamp the
// turn's fence, records and commit, and what the node runs them with.
// The default profile is the node's own settings (WithMachine, WithModel);
// each agent version the node runs has one.
type profile struct {
	nodeSettings
	config turn.Config
	model  Model
	// allow are the only tools an agent's turns are offered; nil offers
	// the node's every tool (the default agent).
	allow   map[string]bool
	log     *sessionlog.Log
	journal *effectlog.Journal
}

// offer is the part of a catalog the profile's turns are offered.
func (p *profile) offer(specs []turn.ToolSpec) []turn.ToolSpec {
	if p.allow == nil {
		return specs
	}
	out := make([]turn.ToolSpec, 0, len(p.allow))
	for _, s := range specs {
		if p.allow[s.Name] {
			out = append(out, s)
		}
	}
	return out
}

// maxProfiles bounds the agent versions a node keeps ready; past it the
// cache starts again (a profile costs one read to make).
const maxProfiles = 1024

// FailNoAgent and FailNoProvider end a turn that can run nowhere: its
// session's agent is gone, or no live node has the agent's provider.
const (
	FailNoAgent    = "agent_unavailable"
	FailNoProvider = "no_provider"
)

// profiles are the node's agent profiles, by version and fingerprint, and
// the pinned revisions it has read.
type profiles struct {
	mu     sync.Mutex
	byVer  map[string]*profile
	byFP   map[[32]byte]*profile
	pinned map[string]*agents.Record
	index  *agents.Index
	start  sync.Once
}

func (n *Node) newProfile(s nodeSettings, model Model) (*profile, error) {
	p := &profile{nodeSettings: s, config: n.opts.machine, model: model}
	if s.Agent != "" {
		c, err := s.Config()
		if err != nil {
			return nil, err
		}
		// The node's hooks stay; what the agent says replaces the rest.
		p.config.Model, p.config.System, p.config.Sampling, p.config.Limits = c.Model, c.System, c.Sampling, c.Limits
		p.config.DecisionWait, p.config.GracePrompt, p.config.Mode = c.DecisionWait, c.GracePrompt, c.Mode
		p.allow = make(map[string]bool, len(s.Tools))
		for _, t := range s.Tools {
			p.allow[t] = true
		}
	}
	p.log, p.journal = n.log.Stamped(p.fingerprint[:]), n.journal.Stamped(p.fingerprint[:])
	return p, nil
}

// agentSettings are the turn settings of an agent version: the node's,
// with what the definition says in their place.
func agentSettings(base Settings, r *agents.Record) Settings {
	d := r.Definition
	s := base
	s.Agent, s.Version, s.Provider, s.Tools = d.Name, r.Version, d.Provider, d.Tools
	s.Model, s.System, s.BeforeTool, s.AfterTool = d.Model, d.Instructions, d.Hooks.BeforeTool, d.Hooks.AfterTool
	s.SubAgents, s.SubAgentDepth = d.SubAgents.Agents, d.SubAgents.MaxDepth
	p := d.Parameters
	s.Temperature, s.TopP, s.MaxTokens, s.Stop = p.Temperature, p.TopP, p.MaxTokens, p.Stop
	l := d.Limits
	if l.MaxIterations > 0 {
		s.MaxIterations = l.MaxIterations
	}
	if l.TokenBudget > 0 {
		s.TokenBudget = l.TokenBudget
	}
	if l.MaxToolFailures > 0 {
		s.MaxToolFailures = l.MaxToolFailures
	}
	if w, err := time.ParseDuration(l.DecisionWait); err == nil && l.DecisionWait != "" {
		s.DecisionWait = w.String()
	}
	s.Mode, s.ProgramCalls = "", 0 // the agent's own, not the default agent's
	if d.Mode != "" && d.Mode != turn.ModeTools.String() {
		s.Mode, s.ProgramCalls = d.Mode, cmp.Or(l.ProgramCalls, turn.DefaultProgramCalls)
	}
	return s
}

// agentIndex is the node's index of agents, following the AGENTS stream
// from the first session bound to one.
func (n *Node) agentIndex() *agents.Index {
	ps := &n.profiles
	ps.start.Do(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.closing {
			return
		}
		n.beats.Add(1)
		go func() {
			defer n.beats.Done()
			_ = ps.index.Run(n.bg)
		}()
	})
	return ps.index
}

// lookupAgent reads the revision ref names: the current one from the
// index (no read once it holds the agent), a pinned one from the stream
// once.
func (n *Node) lookupAgent(ctx context.Context, ref string) (*agents.Record, error) {
	x := n.agentIndex()
	if !strings.Contains(ref, "@") {
		return x.Lookup(ctx, ref)
	}
	ps := &n.profiles
	ps.mu.Lock()
	r := ps.pinned[ref]
	ps.mu.Unlock()
	if r != nil {
		return r, nil
	}
	r, err := agents.New(n.client, n.opts.nodeID).Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	if len(ps.pinned) >= maxProfiles {
		ps.pinned = map[string]*agents.Record{}
	}
	ps.pinned[ref] = r
	ps.mu.Unlock()
	return r, nil
}

// agentProfile is the profile of an agent version, made (and its settings
// stored, once) the first time; nil when the node lacks its provider.
func (n *Node) agentProfile(ctx context.Context, r *agents.Record) (*profile, Settings, error) {
	ps := &n.profiles
	ps.mu.Lock()
	p := ps.byVer[r.Version]
	ps.mu.Unlock()
	if p != nil {
		return p, p.Settings, nil
	}
	s := agentSettings(n.settings.Settings, r)
	model := n.opts.providers[s.Provider]
	if model == nil {
		return nil, s, nil
	}
	ns, err := newNodeSettings(s)
	if err != nil {
		return nil, s, err
	}
	return n.keepProfile(ctx, ns, model, r.Version)
}

func (n *Node) keepProfile(ctx context.Context, ns nodeSettings, model Model, version string) (*profile, Settings, error) {
	if _, err := n.client.PutBlob(ctx, ns.json); err != nil {
		return nil, ns.Settings, fmt.Errorf("lash: storing the turn settings of agent %s: %w", ns.Agent, err)
	}
	p, err := n.newProfile(ns, model)
	if err != nil {
		return nil, ns.Settings, err
	}
	ps := &n.profiles
	ps.mu.Lock()
	if len(ps.byVer) >= maxProfiles {
		ps.byVer, ps.byFP = map[string]*profile{}, map[[32]byte]*profile{}
	}
	if version != "" {
		ps.byVer[version] = p
	}
	ps.byFP[ns.fingerprint] = p
	ps.mu.Unlock()
	return p, ns.Settings, nil
}

// profileByFingerprint is the profile of the settings fp names, when this
// node can run them: its own, or an agent version's whose provider it
// has, written by a node of the same code (label) and formats. It returns
// the settings it read either way.
func (n *Node) profileByFingerprint(ctx context.Context, fp []byte) (*profile, *Settings, error) {
	if bytes.Equal(fp, n.def.fingerprint[:]) {
		return n.def, &n.settings.Settings, nil
	}
	var sum [32]byte
	copy(sum[:], fp)
	ps := &n.profiles
	ps.mu.Lock()
	p := ps.byFP[sum]
	ps.mu.Unlock()
	if p != nil {
		return p, &p.Settings, nil
	}
	s, err := LoadSettings(ctx, n.client, hex.EncodeToString(fp))
	if err != nil {
		return nil, nil, err
	}
	model := n.opts.providers[s.Provider]
	if s.Agent == "" || model == nil || code(s) != code(n.settings.Settings) {
		return nil, &s, nil
	}
	ns, err := newNodeSettings(s)
	if err != nil {
		return nil, &s, err
	}
	if ns.fingerprint != sum {
		// Stored by another encoding of the same settings: run them as
		// they were, never under a fingerprint they did not have.
		return nil, &s, nil
	}
	// Kept by fingerprint only: another node's base settings may differ
	// from this one's, and fresh turns here run this node's.
	p, _, err = n.keepProfile(ctx, ns, model, "")
	return p, &s, err
}

// binding is what a turn's input binds its session to.
type binding struct {
	p *profile
	// spec is the session's agent after the turn (st.agent when the input
	// names none).
	spec string
	// refuse: the input names an agent it cannot, and is consumed with
	// this reason, the session's binding unchanged.
	refuse string
	// fail: the session's agent is gone; its turn fails.
	fail *failure
	// asked is the agent the input named; missing, the settings of the
	// agent version the turn would run, which this node has no provider
	// for (runTurns leaves the turn or fails it, once its journal says the
	// turn did not begin under a version this node runs).
	asked   string
	missing *Settings
}

// bind decides what the turn of input next runs under: the agent it names,
// or the session's, and that agent's current version (or the pinned one).
// Pins come from operators: a pin in an input the deployment did not sign
// is refused, so a client cannot take its session back to a revision with
// more tools or fewer hooks.
// An input screen did not take binds nothing: it starts no turn.
func (s *Session) bind(ctx context.Context, st *state, next *sessionlog.Input, first screened) (binding, error) {
	n := s.n
	b := binding{p: n.def, spec: st.agent}
	if ref := first.in.Agent; first.take && ref != "" {
		var why string
		if b.spec, why = agents.Bind(st.agent, ref, st.turns, n.vouched(*next)); why != "" {
			b.refuse = fmt.Sprintf("%v: session %s: %s", ErrBadInput, s.id, why)
			return b, nil
		}
		b.asked = ref
	}
	if b.spec == "" {
		return b, nil
	}
	r, err := n.lookupAgent(ctx, b.spec)
	switch {
	case errors.Is(err, agents.ErrNotFound) && b.spec != st.agent:
		b.refuse, b.spec = fmt.Sprintf("%v: no agent %s on the deployment", ErrBadInput, b.spec), st.agent
		return b, nil
	case errors.Is(err, agents.ErrNotFound) || errors.Is(err, agents.ErrCorrupt):
		b.fail = &failure{code: FailNoAgent, err: fmt.Errorf("the session's agent %s: %w", b.spec, err)}
		return b, nil
	case err != nil:
		return b, err
	}
	p, set, err := n.agentProfile(ctx, r)
	if err != nil {
		return b, err
	}
	if p == nil {
		b.missing = &set
		return b, nil
	}
	b.p = p
	return b, nil
}

// unrunnable ends a turn whose agent version this node has no provider
// for: left to a live node that has it, or failed when none has.
func (s *Session) unrunnable(ctx context.Context, set *Settings, next *sessionlog.Input) (*failure, error) {
	if err := s.leaveTo(ctx, *set, nil, next); err != nil {
		return nil, err
	}
	return &failure{code: FailNoProvider, err: fmt.Errorf("agent %s (version %.12s) runs on provider %s, which no live node has; this node has %s",
		set.Agent, set.Version, set.Provider, providerList(s.n.opts.providers, "none"))}, nil
}

// code names what a node's turn settings depend on besides what agents
// say: the code label and the formats. A node runs an agent version only
// with the same.
func code(s Settings) string { return fmt.Sprintf("%s/%d/%d", s.Label, s.Hashing, s.Journal) }

// leaveTo finds a live node that runs settings set (whose fingerprint is
// fp, when known) and leaves the session to it: ErrSettingsMismatch. It
// returns nil when there is none.
func (s *Session) leaveTo(ctx context.Context, set Settings, fp []byte, next *sessionlog.Input) error {
	n := s.n
	nodes, err := n.leases.Nodes(ctx)
	if err != nil {
		return err
	}
	want := hex.EncodeToString(fp)
	for _, h := range nodes {
		if h.Owner.ID == n.owner.ID && h.Owner.Incarnation == n.owner.Incarnation {
			continue // this node cannot: it would leave the session to itself
		}
		if fp != nil && h.Owner.Settings == want ||
			set.Agent != "" && h.Owner.Code == code(set) && slices.Contains(strings.Split(h.Owner.Providers, ","), set.Provider) {
			n.observe(Event{Kind: EventSettingsMismatch, Session: s.id, Turn: turnID(next.Seq)})
			what := "settings " + want[:min(len(want), 12)]
			if set.Agent != "" {
				what = "agent " + set.Agent + " on provider " + set.Provider
			}
			return fmt.Errorf("%w: turn %s of session %s runs under %s, which node %s runs; this node runs %s",
				ErrSettingsMismatch, turnID(next.Seq), s.id, what, h.Owner.ID, n.settings.short())
		}
	}
	return nil
}

// providerList names the providers, sorted, comma separated; none when
// there are none.
func providerList(p map[string]Model, none string) string {
	names := make([]string, 0, len(p))
	for k := range p {
		names = append(names, k)
	}
	if len(names) == 0 {
		return none
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}
