package turn

import (
	"reflect"
	"testing"
)

// The waiting states of a program, for the seed's checkpoint tests of its
// programs (RLM): each restores to the same outstanding effect.
func programStates() []waitingState {
	code := baseConfig()
	code.Mode = ModeCode
	tools := syncTools(append([]ToolSpec{{Name: ProgramTool, Description: "runs a program", Schema: `{"type":"object"}`}}, testTools...)...)
	program := replyCalls(ToolCall{ID: "p1", Name: ProgramTool, Arguments: `{"program":"r = parallel([call(read), call(write), call(deploy)])"}`})
	fanout := execCalls(ProgramCall{Ordinal: 0, Kind: ChildTool, Tool: "read", Args: "{}"},
		ProgramCall{Ordinal: 1, Kind: ChildTool, Tool: "write", Args: "{}"}, ProgramCall{Ordinal: 2, Kind: ChildTool, Tool: "deploy", Args: "{}"})
	mixed := childOutcomes(ProgramOutcome{Status: ChildOK, Value: `"read"`}, ProgramOutcome{Status: ChildFailed, Error: "disk full"},
		ProgramOutcome{Status: ChildCancelled})
	return []waitingState{
		{name: "exec-code", cfg: code, steps: []answer{tools, program}, want: KindExecCode},
		{name: "program-calls", cfg: code, steps: []answer{tools, program, fanout}, want: KindProgramCalls},
		{name: "exec-code after a fan-out", cfg: code, steps: []answer{tools, program, fanout, mixed}, want: KindExecCode},
	}
}

func execCalls(calls ...ProgramCall) answer {
	return func(e Effect) Result { return ExecResult{ID: e.Head().ID, Calls: calls} }
}

func childOutcomes(outs ...ProgramOutcome) answer {
	return func(e Effect) Result { return ProgramResults{ID: e.Head().ID, Outcomes: outs} }
}

func TestSnapshotProgramStates(t *testing.T) {
	for _, ws := range programStates() {
		t.Run(ws.name, func(t *testing.T) {
			m := ws.reach(t)
			drain(t, m) // what the program did so far is reported
			r, err := Restore(ws.cfg, mustSnapshot(t, m))
			if err != nil {
				t.Fatal(err)
			}
			// A restored program republishes nothing of its recorded calls:
			// its next effect is the outstanding one.
			em, er := m.Next(), r.Next()
			if _, ok := er.(*Progress); ok {
				t.Fatalf("the restored machine reports again: %s", effectSig(er))
			}
			assertSameEffect(t, em, er)
			switch e := er.(type) {
			case *ExecCode:
				// The pending program runs again with what it knew, each
				// outcome of its fan-out as it came.
				w := em.(*ExecCode)
				if e.Program != w.Program || !reflect.DeepEqual(e.Known, w.Known) {
					t.Fatalf("restored program %q with %+v, want %q with %+v", e.Program, e.Known, w.Program, w.Known)
				}
				if ws.name == "exec-code after a fan-out" {
					var got []ChildStatus
					for _, k := range e.Known {
						got = append(got, k.Outcome.Status)
					}
					if want := []ChildStatus{ChildOK, ChildFailed, ChildCancelled}; !reflect.DeepEqual(got, want) {
						t.Fatalf("fan-out outcomes after restore %v, want %v", got, want)
					}
				}
			case *ProgramCalls:
				if !reflect.DeepEqual(e.Calls, em.(*ProgramCalls).Calls) {
					t.Fatalf("restored calls %+v", e.Calls)
				}
			}
		})
	}
}
