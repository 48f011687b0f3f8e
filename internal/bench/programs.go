package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/turn"
)

// programSamples is the fewest samples Programs takes.
const programSamples = 50

// programCalls is how many calls the compared turns make; modelDelay is
// how long the model takes to answer in the first comparison (a model far
// faster than any served one).
const (
	programCalls = 8
	modelDelay   = 20 * time.Millisecond
)

// Programs is what code mode costs and saves. A program making 8 calls one
// after another, against the same 8 calls made by a tool-calling turn, one
// round each: 9 model calls against 2, each answered in modelDelay; and
// what one more call costs in a program's fan-out, against one more call
// in a tool round, from turns of 8 calls and of 1 (both run their calls at
// once), with a model that answers at once. Each sample times the six
// turns of both modes in turns; ratios are the medians of the samples'
// ratios.
func Programs(ctx context.Context, e *Env, n int) ([]Result, error) {
	n = max(n, programSamples)
	tools, tnc, err := e.node("programs-tools", fmt.Sprintf(`
rule rounds
  when user contains rounds
  when tools < %d
  call echo {}
  delay %s

rule roundsdone
  when user contains rounds
  say done
  delay %s

rule batch
  when user contains batch
  when tools = 0
%s
rule single
  when user contains single
  when tools = 0
  call echo {}

default
  say done
`, programCalls, modelDelay, modelDelay, strings.Repeat("  call echo {}\n", programCalls)))
	if err != nil {
		return nil, err
	}
	defer tnc.Close()
	defer tools.Close(context.Background())
	code, cnc, err := e.node("programs-code", fmt.Sprintf(`
rule seq
  when user contains seq
  when tools = 0
  call run_program {"program": "for i in range(%d):\n  echo()"}
  delay %s

rule seqdone
  when user contains seq
  say done
  delay %s

rule fan
  when user contains fan
  when tools = 0
  call run_program {"program": "parallel([call(echo) for i in range(%d)])"}

rule one
  when user contains one
  when tools = 0
  call run_program {"program": "parallel([call(echo)])"}

default
  say done
`, programCalls, modelDelay, modelDelay, programCalls), lash.WithMachine(turn.Config{Model: "scripted", Mode: turn.ModeCode}))
	if err != nil {
		return nil, err
	}
	defer cnc.Close()
	defer code.Close(context.Background())
	run := func(node *lash.Node, i int, text string) (time.Duration, error) {
		s := node.Session(fmt.Sprintf("pg-%s-%d", text, i))
		if _, _, err := s.Send(ctx, "k", lash.Input{Text: text}); err != nil {
			return 0, err
		}
		start := time.Now()
		res, err := s.Run(ctx)
		took := time.Since(start)
		if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
			return 0, fmt.Errorf("programs: %s: %+v, %v", text, res, err)
		}
		for _, m := range res[0].Outcome.Messages {
			if m.Role == turn.RoleTool && m.Error {
				return 0, fmt.Errorf("programs: %s: %s", text, m.Text)
			}
		}
		return took, nil
	}
	var seq, rounds, seqOwn, roundsOwn, perChild, perCall, seqRatios, callRatios []float64
	for i := range n + 3 {
		var t [6]time.Duration
		steps := []struct {
			node *lash.Node
			text string
		}{{code, "seq"}, {tools, "rounds"}, {code, "fan"}, {code, "one"}, {tools, "batch"}, {tools, "single"}}
		for j := range steps {
			k := j
			if i%2 == 1 { // in turns first
				k = len(steps) - 1 - j
			}
			if t[k], err = run(steps[k].node, i, steps[k].text); err != nil {
				return nil, err
			}
		}
		if i < 3 {
			continue // warm-up
		}
		child := float64(t[2]-t[3]) / (programCalls - 1)
		call := float64(t[4]-t[5]) / (programCalls - 1)
		seq, rounds = append(seq, ms(t[0])), append(rounds, ms(t[1]))
		seqOwn, roundsOwn = append(seqOwn, ms(t[0]-2*modelDelay)), append(roundsOwn, ms(t[1]-(programCalls+1)*modelDelay))
		perChild, perCall = append(perChild, child/1e6), append(perCall, call/1e6)
		seqRatios = append(seqRatios, float64(t[0])/float64(t[1]))
		if call > 0 {
			callRatios = append(callRatios, child/call)
		}
	}
	note := fmt.Sprintf("the median of %d samples' ratios, the turns of both modes timed in turns", len(seqRatios))
	return []Result{
		{Name: fmt.Sprintf("a program of %d calls, against %d tool rounds (%s)", programCalls, programCalls, e.Mode()),
			Value: median(seq), Unit: "ms", Floor: median(rounds), Ratio: median(seqRatios),
			Note: fmt.Sprintf("%s; below 1 is better; less the model's %s a call, %.3f ms against %.3f ms", note, modelDelay, median(seqOwn), median(roundsOwn))},
		{Name: fmt.Sprintf("one more call in a program's fan-out, against one more in a tool round (%s)", e.Mode()),
			Value: median(perChild), Unit: "ms", Floor: median(perCall), Ratio: median(callRatios),
			Note: fmt.Sprintf("(turn of %d calls - turn of 1) / %d in each mode; %s", programCalls, programCalls-1, note)},
	}, nil
}
