package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/tools/mcptool"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// toolSet keeps a node's registry: the built-in tools, and the tools served
// over NATS as discovery finds them.
type toolSet struct {
	reg    *tools.Registry
	nc     *nats.Conn
	prefix string
	log    *slog.Logger
	// problem is called for each endpoint discovery leaves out.
	problem func()

	mu      sync.Mutex
	builtin map[string]bool
	remote  map[string]turn.ToolSpec
	// missed counts the discoveries in a row that did not find a remote
	// tool: one missed answer, a restart or a deploy must not take it away
	// from turns that are calling it.
	missed map[string]int
	// known holds the problems logged already, so a bad endpoint is
	// logged when it appears, not at every refresh.
	known map[string]bool
	// settleEnd: until then tools served over NATS may still be coming
	// back (a start, a reconnect): see settle.
	settleEnd time.Time
	// mcp are the MCP servers listed (--mcp-servers); fromMCP names the
	// server of each of their tools in the registry.
	mcp      []*mcptool.Source
	fromMCP  map[string]string
	knownMCP map[string]bool
}

// settleEvery is how often tools are discovered while they may still be
// coming back.
const settleEvery = 500 * time.Millisecond

// settle opens a window in which tools served over NATS may still be
// coming back: after the node starts or reconnects, their servers
// reconnect too, and until discovery finds them a call to one of them
// must not fail as unknown. For natstool.NoServerWait (the time a call
// waits for a server of its tool to come back) the registry is settling
// (tools.Registry.Settling): a call to a tool it lacks waits for it, and
// discovery runs every settleEvery. The first discovery begun after the
// window ends settles the registry: a tool still missing is known gone.
func (t *toolSet) settle(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settleEnd = now.Add(natstool.NoServerWait)
	// A bound of its own, should the refresh loop stop.
	t.reg.Settling(t.settleEnd.Add(natstool.DefaultDiscoverTimeout + settleEvery))
}

// settling reports whether a discovery begun at now falls in the window.
func (t *toolSet) settling(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.settleEnd.IsZero() && now.Before(t.settleEnd)
}

// settled ends the window once a discovery begun after it is done.
func (t *toolSet) settled(begun time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.settleEnd.IsZero() && !begun.Before(t.settleEnd) {
		t.settleEnd = time.Time{}
		t.reg.Settling(time.Time{})
	}
}

func newToolSet(nc *nats.Conn, prefix string, log *slog.Logger, problem func()) (*toolSet, error) {
	t := &toolSet{reg: tools.New(), nc: nc, prefix: prefix, log: log, problem: problem,
		builtin: map[string]bool{}, remote: map[string]turn.ToolSpec{}, missed: map[string]int{}, known: map[string]bool{}, fromMCP: map[string]string{}, knownMCP: map[string]bool{}}
	if err := builtin.Register(t.reg, prefix, time.Now); err != nil {
		return nil, err
	}
	for _, spec := range t.reg.Specs() {
		t.builtin[spec.Name] = true
	}
	t.settle(time.Now())
	return t, nil
}

// addBuiltin registers tools the node itself offers, which discovery
// never removes.
func (t *toolSet) addBuiltin(ts ...tools.Tool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tool := range ts {
		if err := t.reg.Register(tool); err != nil {
			return err
		}
		t.builtin[tool.Spec().Name] = true
	}
	return nil
}

// goneAfter is how many discoveries in a row must miss a remote tool before
// it is removed. Until then a call waits for a server (natstool.NoServerWait).
const goneAfter = 3

// sync discovers the tools served over NATS and brings the registry in
// line: new tools are registered, changed ones replaced, tools missed by
// goneAfter discoveries in a row removed; a tool whose servers disagree
// keeps what it had. Endpoints discovery leaves out are logged once each.
// A failed discovery (no answer at all, the connection down) changes
// nothing.
func (t *toolSet) sync(ctx context.Context) error {
	t.syncMCP(ctx)
	found, err := natstool.Discover(ctx, t.nc, t.prefix)
	if err != nil && !errors.Is(err, natstool.ErrMalformed) && !errors.Is(err, natstool.ErrConflict) {
		return fmt.Errorf("tool discovery: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	problems := map[string]bool{}
	if err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			problems[e.Error()] = true
		}
	}
	seen := map[string]bool{}
	gone := false
	for _, tool := range found {
		spec := tool.Spec()
		if t.builtin[spec.Name] {
			problems[fmt.Sprintf("tool %q served over NATS is left out: a built-in tool has its name", spec.Name)] = true
			continue
		}
		if _, fromMCP := t.fromMCP[spec.Name]; fromMCP {
			problems[fmt.Sprintf("tool %q served over NATS is left out: an MCP server's tool has its name", spec.Name)] = true
			continue
		}
		seen[spec.Name] = true
		old, ok := t.remote[spec.Name]
		if ok && old == spec {
			continue
		}
		if err := t.reg.Replace(tool); err != nil {
			problems[err.Error()] = true
			continue
		}
		t.remote[spec.Name] = spec
		if ok {
			t.log.Info("tool changed", "tool", spec.Name)
		} else {
			t.log.Info("tool found", "tool", spec.Name, "subject", natstool.Subject(t.prefix, spec.Name))
		}
	}
	for name := range t.remote {
		if seen[name] || conflicted(err, name) {
			delete(t.missed, name)
			continue
		}
		if t.missed[name]++; t.missed[name] >= goneAfter {
			t.reg.Remove(name)
			delete(t.remote, name)
			delete(t.missed, name)
			t.log.Info("tool gone", "tool", name)
			gone = true
		}
	}
	if gone {
		// Missed answers are not proof: a slow link drops a service's
		// answer past the discovery's quiet time as surely as a stopped
		// service gives none. For a while a call to the tool waits for
		// it, as after a start; a background process would otherwise
		// fail for good on a tool that is back a second later.
		t.settleEnd = time.Now().Add(natstool.NoServerWait)
		t.reg.Settling(t.settleEnd.Add(natstool.DefaultDiscoverTimeout + settleEvery))
	}
	for p := range problems {
		if !t.known[p] {
			t.log.Warn("tool endpoint left out", "problem", p)
			if t.problem != nil {
				t.problem()
			}
		}
	}
	t.known = problems
	return nil
}

// refresh syncs every interval until ctx ends, every settleEvery while
// tools may still be coming back, and opens that window again at each
// reconnect.
func (t *toolSet) refresh(ctx context.Context, every time.Duration, reconnected <-chan struct{}) {
	next := time.NewTimer(t.interval(time.Now(), every))
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reconnected:
			t.settle(time.Now())
		case <-next.C:
			begun := time.Now()
			err := t.sync(ctx)
			if err != nil && ctx.Err() == nil {
				t.log.Warn("tools served over NATS not refreshed", "err", err)
			}
			if err == nil {
				t.settled(begun)
			}
		}
		next.Reset(t.interval(time.Now(), every))
	}
}

func (t *toolSet) interval(now time.Time, every time.Duration) time.Duration {
	if t.settling(now) {
		return min(every, settleEvery)
	}
	return every
}

// syncMCP lists the tools of every MCP server and brings the registry in
// line for each server that answered: its new tools registered, changed
// ones replaced, those it no longer lists removed. A server that did not
// answer keeps its tools: a call to one fails as the server does, and the
// next listing starts it again.
func (t *toolSet) syncMCP(ctx context.Context) {
	now := map[string]bool{} // the problems of this refresh
	defer func() {
		t.mu.Lock()
		t.knownMCP = now
		t.mu.Unlock()
	}()
	for _, src := range t.mcp {
		// A server that does not answer holds up neither the start nor the
		// discovery of the other tools.
		lctx, cancel := context.WithTimeout(ctx, mcpListTimeout)
		found, problems, err := src.Tools(lctx)
		cancel()
		t.mu.Lock()
		if err != nil {
			p := "MCP server " + src.Name() + " not listed"
			if !t.knownMCP[p] {
				t.log.Warn(p, "err", err)
			}
			now[p] = true
			t.mu.Unlock()
			continue
		}
		seen := map[string]bool{}
		for _, tool := range found {
			spec := tool.Spec()
			if t.builtin[spec.Name] {
				problems = append(problems, fmt.Sprintf("MCP tool %q is left out: a built-in tool has its name", spec.Name))
				continue
			}
			if _, onNATS := t.remote[spec.Name]; onNATS {
				problems = append(problems, fmt.Sprintf("MCP tool %q is left out: a tool served over NATS has its name", spec.Name))
				continue
			}
			seen[spec.Name] = true
			if err := t.reg.Replace(tool); err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if _, ok := t.fromMCP[spec.Name]; !ok {
				t.log.Info("tool found", "tool", spec.Name, "mcp", src.Name())
			}
			t.fromMCP[spec.Name] = src.Name()
		}
		for name, from := range t.fromMCP {
			if from == src.Name() && !seen[name] {
				t.reg.Remove(name)
				delete(t.fromMCP, name)
				t.log.Info("tool gone", "tool", name, "mcp", src.Name())
			}
		}
		for _, p := range problems {
			if !t.knownMCP[p] {
				t.log.Warn("tool endpoint left out", "problem", p)
				if t.problem != nil {
					t.problem()
				}
			}
			now[p] = true
		}
		t.mu.Unlock()
	}
}

// mcpListTimeout bounds listing one MCP server's tools, connecting
// included.
const mcpListTimeout = 10 * time.Second

// close stops the MCP servers the node runs.
func (t *toolSet) close() {
	for _, src := range t.mcp {
		_ = src.Close()
	}
}

// count is how many tools the registry holds.
func (t *toolSet) count() int { return t.reg.Len() }

// conflicted reports whether discovery left name out because its servers
// disagree: the tool is still served.
func conflicted(err error, name string) bool {
	var c *natstool.ConflictError
	return errors.As(err, &c) && c.Name == name
}

// minToolRefresh is the shortest --tool-refresh.
const minToolRefresh = 100 * time.Millisecond
