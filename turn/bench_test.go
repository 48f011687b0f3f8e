package turn

import (
	"fmt"
	"testing"
)

// benchIterations is how many tool rounds the benchmark turn has: in each
// the model asks for two calls; one more inference then gives the answer.
const benchIterations = 10

// benchScript is the pre-built model answers and tool results of the
// benchmark turn, so that a run measures the machine and not the script.
type benchScript struct {
	responses []*ModelResponse // by iteration-1; the last one answers
	results   [][]ToolResult   // by iteration-1
}

func newBenchScript() *benchScript {
	s := &benchScript{}
	for i := 1; i <= benchIterations; i++ {
		a, b := fmt.Sprintf("call-%d-a", i), fmt.Sprintf("call-%d-b", i)
		s.responses = append(s.responses, &ModelResponse{
			Text:   fmt.Sprintf("Round %d: reading two files.", i),
			Finish: FinishToolCalls,
			Usage:  Usage{InputTokens: int64(200 * i), OutputTokens: 40},
			ToolCalls: []ToolCall{
				{ID: a, Name: "read", Arguments: fmt.Sprintf(`{"path":"src/file_%d_a.go"}`, i)},
				{ID: b, Name: "read", Arguments: fmt.Sprintf(`{"path":"src/file_%d_b.go"}`, i)},
			},
		})
		s.results = append(s.results, []ToolResult{
			{CallID: a, Status: ToolOK, Output: fmt.Sprintf("package main // %d lines of file %d a", 40*i, i)},
			{CallID: b, Status: ToolOK, Output: fmt.Sprintf("package main // %d lines of file %d b", 40*i, i)},
		})
	}
	s.responses = append(s.responses, &ModelResponse{Text: "Here is the summary of all twenty files.", Finish: FinishStop,
		Usage: Usage{InputTokens: 2400, OutputTokens: 300}})
	return s
}

// run drives a fresh machine through the turn. With stopAt > 0 it returns
// the machine waiting on the model call of that iteration.
func (s *benchScript) run(tb testing.TB, stopAt int) *Machine {
	m, err := New(baseConfig(), testStart())
	if err != nil {
		tb.Fatal(err)
	}
	return s.drive(tb, m, stopAt, nil)
}

// drive answers m's effects from the script, calling onCall (when set)
// with each model call before it is answered.
func (s *benchScript) drive(tb testing.TB, m *Machine, stopAt int, onCall func(*LLMCall)) *Machine {
	for {
		var r Result
		switch e := m.Next().(type) {
		case *Progress, *Emit:
			continue
		case *Done:
			if e.Outcome.Termination.Reason != NaturalEnd || e.Outcome.Iterations != benchIterations+1 {
				tb.Fatalf("benchmark turn ended %s after %d iterations", e.Outcome.Termination, e.Outcome.Iterations)
			}
			return m
		case *SyncTools:
			r = ToolsSynced{ID: e.H.ID, Tools: testTools}
		case *LLMCall:
			it := e.H.Key.Iteration
			if it == stopAt {
				return m
			}
			if onCall != nil {
				onCall(e)
			}
			r = LLMResult{ID: e.H.ID, Response: s.responses[it-1]}
		case *ToolCalls:
			r = ToolResults{ID: e.H.ID, Results: s.results[e.H.Key.Iteration-1]}
		case *Checkpoint:
			r = CheckpointResult{ID: e.H.ID}
		default:
			tb.Fatalf("unexpected effect %s", effectSig(e))
		}
		if err := m.Deliver(r); err != nil {
			tb.Fatal(err)
		}
	}
}

func BenchmarkTenIterationTurn(b *testing.B) {
	s := newBenchScript()
	b.ReportAllocs()
	for b.Loop() {
		s.run(b, 0)
	}
}

// midTurn is the machine halfway through the benchmark turn, waiting on a
// model call with five tool rounds in its conversation.
func midTurn(b *testing.B) (*Machine, []byte) {
	m := newBenchScript().run(b, benchIterations/2+1)
	return m, mustSnapshot(b, m)
}

func BenchmarkSnapshotEncode(b *testing.B) {
	m, snap := midTurn(b)
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(snap)), "bytes/snapshot")
}

func BenchmarkSnapshotDecode(b *testing.B) {
	_, snap := midTurn(b)
	cfg := baseConfig()
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Restore(cfg, snap); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(snap)), "bytes/snapshot")
}
