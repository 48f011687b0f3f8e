// Command scripted-turn drives one agent turn through the turn machine
// against a scripted model, in-process. The first worker "crashes" in the
// middle of the turn; a second worker replays the journal it left and
// finishes the turn without calling the model or the tools again for work
// already recorded.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/lash-run/lash/turn"
)

// entry is one journaled answer, with the hash of the request it answered.
type entry struct {
	hash   turn.Hash
	result turn.Result
}

// journal maps replay keys to answers. In lash it lives on JetStream; here
// it is a map that outlives the crashed worker.
type journal map[string]entry

type counters struct{ model, tools int }

var errCrash = errors.New("worker crashed")

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scripted-turn:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := turn.Config{Model: "scripted", System: "You are a weather assistant."}
	start := turn.Start{Session: "demo", Turn: "turn-1", Input: turn.Input{
		Messages: []turn.Message{{Role: turn.RoleUser, Text: "Weather in Oslo, Lima and Pune?"}}}}
	j := journal{}

	fmt.Println("worker 1: starting the turn")
	var c1 counters
	_, err := drive(cfg, start, j, &c1, 4)
	if !errors.Is(err, errCrash) {
		return fmt.Errorf("worker 1 should have crashed, got %v", err)
	}
	fmt.Printf("worker 1: crashed after %d journal entries (model calls %d, tool runs %d)\n\n", len(j), c1.model, c1.tools)

	fmt.Println("worker 2: replaying the journal and finishing the turn")
	var c2 counters
	out, err := drive(cfg, start, j, &c2, -1)
	if err != nil {
		return err
	}
	fmt.Printf("worker 2: done (model calls %d, tool runs %d)\n\n", c2.model, c2.tools)
	fmt.Printf("outcome: %s, %d iterations\n", out.Termination, out.Iterations)
	for _, m := range out.Messages {
		line := m.Role.String() + ": " + m.Text
		for _, c := range m.ToolCalls {
			line += fmt.Sprintf(" [call %s %s]", c.Name, c.Arguments)
		}
		fmt.Println("  " + line)
	}
	return nil
}

// drive runs the machine, answering from the journal where it can and doing
// the work otherwise. It crashes once crashAfter new entries were recorded.
func drive(cfg turn.Config, start turn.Start, j journal, c *counters, crashAfter int) (turn.Outcome, error) {
	m, err := turn.New(cfg, start)
	if err != nil {
		return turn.Outcome{}, err
	}
	recorded := 0
	for {
		e := m.Next()
		switch e := e.(type) {
		case *turn.Progress, *turn.Emit:
			continue
		case *turn.Done:
			return e.Outcome, nil
		case *turn.ToolCalls:
			// Each call has its own key: a crash mid-batch re-runs only the
			// calls without a recorded result.
			var res turn.ToolResults
			res.ID = e.H.ID
			for _, pc := range e.Calls {
				key := pc.Key.String()
				if ent, ok := j[key]; ok {
					if ent.hash != pc.Hash {
						return turn.Outcome{}, fmt.Errorf("nondeterminism at %s", key)
					}
					fmt.Printf("  replayed %s\n", key)
					res.Results = append(res.Results, ent.result.(turn.ToolResults).Results...)
					continue
				}
				if recorded == crashAfter {
					return turn.Outcome{}, errCrash
				}
				one := turn.ToolResults{ID: e.H.ID, Results: []turn.ToolResult{runTool(pc.Call, c)}}
				j[key] = entry{pc.Hash, one}
				recorded++
				fmt.Printf("  executed %s\n", key)
				res.Results = append(res.Results, one.Results...)
			}
			if err := m.Deliver(res); err != nil {
				return turn.Outcome{}, err
			}
		default:
			h := e.Head()
			key := h.Key.String()
			ent, ok := j[key]
			if ok {
				if ent.hash != h.Hash {
					return turn.Outcome{}, fmt.Errorf("nondeterminism at %s", key)
				}
				fmt.Printf("  replayed %s\n", key)
			} else {
				if recorded == crashAfter {
					return turn.Outcome{}, errCrash
				}
				ent = entry{h.Hash, answer(e, c)}
				j[key] = ent
				recorded++
				fmt.Printf("  executed %s\n", key)
			}
			if err := m.Deliver(ent.result); err != nil {
				return turn.Outcome{}, err
			}
		}
	}
}

// answer performs an effect other than a tool batch.
func answer(e turn.Effect, c *counters) turn.Result {
	id := e.Head().ID
	switch e := e.(type) {
	case *turn.SyncTools:
		return turn.ToolsSynced{ID: id, Tools: []turn.ToolSpec{{Name: "weather", Description: "current weather for a city",
			Schema: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}}}
	case *turn.LLMCall:
		c.model++
		return turn.LLMResult{ID: id, Response: scriptedModel(e.Request)}
	case *turn.Sleep:
		return turn.SleepDone{ID: id}
	case *turn.Checkpoint:
		return turn.CheckpointResult{ID: id}
	case *turn.AwaitEvent:
		return turn.EventResult{ID: id, TimedOut: true}
	}
	panic(fmt.Sprintf("unexpected effect %T", e))
}

// scriptedModel asks for three lookups, then answers from the tool results.
func scriptedModel(req turn.ModelRequest) *turn.ModelResponse {
	var results []string
	for _, m := range req.Messages {
		if m.Role == turn.RoleTool {
			results = append(results, m.Text)
		}
	}
	if len(results) == 0 {
		var calls []turn.ToolCall
		for i, city := range []string{"Oslo", "Lima", "Pune"} {
			calls = append(calls, turn.ToolCall{ID: fmt.Sprintf("call-%d", i+1), Name: "weather", Arguments: `{"city":"` + city + `"}`})
		}
		return &turn.ModelResponse{ToolCalls: calls, Finish: turn.FinishToolCalls, Usage: turn.Usage{InputTokens: 40, OutputTokens: 30}}
	}
	return &turn.ModelResponse{Text: strings.Join(results, "; "), Finish: turn.FinishStop, Usage: turn.Usage{InputTokens: 90, OutputTokens: 20}}
}

func runTool(call turn.ToolCall, c *counters) turn.ToolResult {
	c.tools++
	weather := map[string]string{"Oslo": "Oslo: 2C, snow", "Lima": "Lima: 19C, overcast", "Pune": "Pune: 31C, sunny"}
	for city, w := range weather {
		if strings.Contains(call.Arguments, city) {
			return turn.ToolResult{CallID: call.ID, Status: turn.ToolOK, Output: w}
		}
	}
	return turn.ToolResult{CallID: call.ID, Status: turn.ToolError, Output: "unknown city"}
}
