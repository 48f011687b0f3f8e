package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/turn"
)

// agentSamples is the fewest samples AgentTurn takes.
const agentSamples = 100

// AgentTurn is what binding a session to a named agent costs: a turn of a
// session under an agent (its own provider, prompt and tool allowlist)
// against the same turn under the node's default agent, on one node, the
// two timed one after the other in each sample (in turns first); the ratio is the median of
// the samples' ratios, and the note says what the node sent per turn of
// each (the agent's lookup is to add no round trip).
func AgentTurn(ctx context.Context, e *Env, n int) (Result, error) {
	n = max(n, agentSamples)
	script := loopScript(1)
	model := scripted.NewModel(scripted.MustParse(script))
	// The default agent asks what the named one asks: the same prompt, so
	// that what differs is the binding alone.
	node, nc, err := e.node("agents", script, lash.WithProviders(map[string]lash.Model{"openai": model}),
		lash.WithMachine(turn.Config{Model: "scripted", System: "You are measured."}))
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	def := &agents.Definition{Name: "bench", Instructions: "You are measured.", Provider: "openai", Model: "scripted", Tools: []string{"echo"}}
	if _, _, err := agents.New(node.Streams(), "bench").Apply(ctx, def, -1); err != nil {
		return Result{}, err
	}
	var sent [2]uint64
	turn := func(i int, agent string) (time.Duration, error) {
		s := node.Session(fmt.Sprintf("ag-%s-%d", agent, i))
		if _, _, err := s.Send(ctx, "k", lash.Input{Text: "rounds", Agent: agent}); err != nil {
			return 0, err
		}
		before := nc.Stats().OutMsgs
		start := time.Now()
		res, err := s.Run(ctx)
		took := time.Since(start)
		if err != nil || len(res) != 1 || res[0].Executed == 0 {
			return 0, fmt.Errorf("agent turn: %v, %v", res, err)
		}
		if i >= 3 {
			sent[min(len(agent), 1)] += nc.Stats().OutMsgs - before
		}
		return took, nil
	}
	var ratios []float64
	var plain, named []time.Duration
	for i := range n + 3 {
		// In turns first, so that neither gains from following the other.
		var a, b time.Duration
		var err error
		if i%2 == 0 {
			if a, err = turn(i, ""); err == nil {
				b, err = turn(i, "bench")
			}
		} else if b, err = turn(i, "bench"); err == nil {
			a, err = turn(i, "")
		}
		if err != nil {
			return Result{}, err
		}
		if i >= 3 {
			plain, named = append(plain, a), append(named, b)
			ratios = append(ratios, float64(b)/float64(a))
		}
	}
	return Result{Name: "turn under a named agent (" + e.Mode() + ")", Value: ms(median(named)), Unit: "ms", Floor: ms(median(plain)),
		Ratio: median(ratios), Note: fmt.Sprintf("against the same turn under the default agent timed with it, the median of %d samples' ratios; %.1f messages from the node per turn under the agent, %.1f under the default",
			len(ratios), float64(sent[1])/float64(n), float64(sent[0])/float64(n))}, nil
}
