package lash

import (
	"context"
	"errors"
	"fmt"

	"github.com/lash-run/lash/codemode"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/turn"
)

// verifyProgram replays a program whose end is not recorded (it parked, or
// its turn was cancelled while it ran): it runs again from its start, its
// calls answered from Known and from the journal, as a node replaying it
// would, until the machine asks for something else (the program parked,
// or ended). Otherwise it says why the program cannot be replayed (a call
// not in the journal: unverifiable) or went another way (nondeterminism:
// diverged).
func (i *Inspector) verifyProgram(ctx context.Context, mach *turn.Machine, e *turn.ExecCode, tools []turn.ToolSpec,
	recorded map[turn.ReplayKey]*effectlog.Record) (*Divergence, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	calls := make(chan []codemode.Call)
	outs := make(chan []codemode.Outcome)
	ended := make(chan error, 1)
	host := &progHost{r: &progRun{origin: e.H.Key, calls: calls, outs: outs}, known: e.Known}
	go func() {
		_, err := i.programs.run(ctx, e.Program, codeTools(tools), host, codemode.Limits{})
		ended <- err
	}()
	var from, to int // the batch the program waits on
	for {
		var res turn.ExecResult
		select {
		case cs := <-calls:
			res = turn.ExecResult{ID: e.H.ID}
			for _, c := range cs {
				res.Calls = append(res.Calls, programCall(c))
			}
			from, to = cs[0].Ordinal, cs[len(cs)-1].Ordinal+1
		case err := <-ended:
			var nd *effectlog.NondeterminismError
			if errors.As(err, &nd) {
				return &Divergence{Key: nd.Key.String(), Detail: "the program makes another call here than the one recorded"}, "", nil
			}
			if err != nil {
				return nil, "", err
			}
			return nil, fmt.Sprintf("%s ran to its end, which is not in the journal", e.H.Key), nil
		}
		if err := mach.Deliver(res); err != nil {
			return nil, "", err
		}
		for {
			pc, ok := outstanding(mach).(*turn.ProgramCalls)
			if !ok {
				break
			}
			outcomes := make([]turn.ProgramOutcome, len(pc.Calls))
			for k, c := range pc.Calls {
				rec, ok := recorded[c.Key]
				if !ok {
					return nil, fmt.Sprintf("%s is not in the journal (past its retention?)", c.Key), nil
				}
				if rec.Hash != c.Hash {
					return &Divergence{Key: c.Key.String(), Recorded: rec.Hash.String(), Current: c.Hash.String(),
						Detail: "the program makes another call here than the one recorded"}, "", nil
				}
				a, err := decodeAnswer(rec.Outcome.Data)
				if err != nil {
					return nil, err.Error(), nil
				}
				if a.Cancel != nil {
					if err := mach.Deliver(turn.Cancel{ID: pc.H.ID, Reason: *a.Cancel}); err != nil {
						return nil, "", err
					}
					return nil, "", nil
				}
				outcomes[k] = childOutcome(c.Call.Kind, a)
			}
			if err := mach.Deliver(turn.ProgramResults{ID: pc.H.ID, Outcomes: outcomes}); err != nil {
				return nil, "", err
			}
		}
		next, ok := outstanding(mach).(*turn.ExecCode)
		if !ok || next.H.Key != e.H.Key || to > len(next.Known) {
			return nil, "", nil // the program parked, or ended
		}
		batch := make([]codemode.Outcome, 0, to-from)
		for _, k := range next.Known[from:to] {
			batch = append(batch, codeOutcome(*k.Outcome))
		}
		select {
		case outs <- batch:
		case err := <-ended:
			return nil, "", fmt.Errorf("lash: the program ended while waiting for its calls: %v", err)
		}
		e = next
	}
}

// outstanding is the machine's outstanding effect, past what it reports
// (Progress and Emit, which verify has no use for).
func outstanding(m *turn.Machine) turn.Effect {
	for {
		switch e := m.Next().(type) {
		case *turn.Progress, *turn.Emit:
		default:
			return e
		}
	}
}
