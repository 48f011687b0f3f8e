package processes

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// logOf folds a process from events given as (type, token, data), numbered
// in order after a registration of reg.
func logOf(t *testing.T, reg Registration, evs ...Event) *Process {
	t.Helper()
	all := []Event{{V: Version, N: 1, Type: TypeRegistered, Data: jsonData(reg), Seq: 1}}
	for i, e := range evs {
		e.V, e.N, e.Seq = Version, uint64(i+2), uint64(i+2)
		if k := keyOf(e.Type); k != "" {
			e.Key = k
		}
		all = append(all, e)
	}
	p, err := fold("p", all)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func started(token uint64, attempt int) Event {
	return Event{Type: TypeStarted, Token: token, Data: jsonData(Start{Owner: Owner{Node: "n"}, Attempt: attempt, Token: token})}
}

func TestCheckRules(t *testing.T) {
	job := Registration{Input: Input{Kind: ToolCall, Tool: "t"}, Disposition: Rerunnable, EventTypes: []string{"progress"}, Provenance: Provenance{Host: "h"}}
	bound := job
	bound.Disposition = OwnerBound
	ext := Registration{Input: Input{Kind: External, ExternalRef: "r"}, Disposition: ExternallyOwned, Provenance: Provenance{Host: "h"}}
	abandon := func(w AbandonWriter) json.RawMessage { return jsonData(Abandonment{Writer: w, Evidence: "e"}) }
	cases := []struct {
		name string
		p    *Process
		e    Event
		want error // nil: accepted
		dup  bool
	}{
		{"first start", logOf(t, job), started(5, 1), nil, false},
		{"rerun with a newer token", logOf(t, job, started(5, 1)), started(9, 2), nil, false},
		{"start with an older token", logOf(t, job, started(5, 1)), started(4, 2), ErrFenced, false},
		{"start twice with one token", logOf(t, job, started(5, 1)), started(5, 2), ErrFenced, false},
		{"start with a wrong attempt", logOf(t, job, started(5, 1)), started(9, 3), ErrInvalid, false},
		{"start without a token", logOf(t, job), Event{Type: TypeStarted, Data: jsonData(Start{Attempt: 1})}, ErrInvalid, false},
		{"release by the runner", logOf(t, job, started(5, 1)), Event{Type: TypeReleased, Token: 5}, nil, false},
		{"release by an older runner", logOf(t, job, started(5, 1), started(9, 2)), Event{Type: TypeReleased, Token: 5}, ErrFenced, false},
		{"release twice", logOf(t, job, started(5, 1), Event{Type: TypeReleased, Token: 5}), Event{Type: TypeReleased, Token: 5}, ErrRefused, false},
		{"release of owner-bound work", logOf(t, bound, started(5, 1)), Event{Type: TypeReleased, Token: 5}, ErrRefused, false},
		{"progress after the release", logOf(t, job, started(5, 1), Event{Type: TypeReleased, Token: 5}), Event{Type: "progress", Token: 5}, ErrFenced, false},
		{"completion after the release", logOf(t, job, started(5, 1), Event{Type: TypeReleased, Token: 5}), Event{Type: TypeCompleted, Token: 5}, ErrFenced, false},
		{"the next attempt after the release", logOf(t, job, started(5, 1), Event{Type: TypeReleased, Token: 5}), started(6, 2), nil, false},
		{"a start carried by another event", logOf(t, job), Event{Type: "progress", Start: &Start{Attempt: 1, Token: 1}}, ErrInvalid, false},
		{"second start of owner-bound work", logOf(t, bound, started(5, 1)), started(9, 2), ErrRefused, false},
		{"start of external work", logOf(t, ext), started(5, 1), ErrRefused, false},
		{"progress by the runner", logOf(t, job, started(5, 1)), Event{Type: "progress", Token: 5}, nil, false},
		{"progress by an older runner", logOf(t, job, started(5, 1), started(9, 2)), Event{Type: "progress", Token: 5}, ErrFenced, false},
		{"progress by a holder that did not start", logOf(t, job, started(5, 1)), Event{Type: "progress", Token: 7}, ErrFenced, false},
		{"progress with no lease", logOf(t, job, started(5, 1)), Event{Type: "progress"}, ErrRefused, false},
		{"progress by an external owner", logOf(t, ext), Event{Type: TypeWaiting, Authority: ByExternalOwner}, nil, false},
		{"undeclared type", logOf(t, job, started(5, 1)), Event{Type: "other", Token: 5}, ErrInvalid, false},
		{"malformed type", logOf(t, job), Event{Type: "Bad Type"}, ErrInvalid, false},
		{"a reserved key", logOf(t, job, started(5, 1)), Event{Type: "progress", Key: KeyTerminal, Token: 5}, ErrInvalid, false},
		{"a registration appended", logOf(t, job), Event{Type: TypeRegistered}, ErrInvalid, false},
		{"a token and an authority", logOf(t, ext), Event{Type: TypeCompleted, Token: 3, Authority: ByExternalOwner}, ErrInvalid, false},
		{"completion by the runner", logOf(t, job, started(5, 1)), Event{Type: TypeCompleted, Token: 5}, nil, false},
		{"completion by a holder that did not run it", logOf(t, job, started(5, 1)), Event{Type: TypeCompleted, Token: 7}, ErrFenced, false},
		{"completion by an external owner of work lash runs", logOf(t, job), Event{Type: TypeCompleted, Authority: ByExternalOwner}, ErrRefused, false},
		{"completion of external work", logOf(t, ext), Event{Type: TypeCompleted, Authority: ByExternalOwner}, nil, false},
		{"cancelled by a newer holder", logOf(t, job, started(5, 1)), Event{Type: TypeCancelled, Token: 7}, nil, false},
		{"the same terminal again", logOf(t, ext, Event{Type: TypeCompleted, Authority: ByExternalOwner, Data: json.RawMessage(`1`)}),
			Event{Type: TypeCompleted, Authority: ByExternalOwner, Data: json.RawMessage(`1`)}, nil, true},
		{"another terminal", logOf(t, ext, Event{Type: TypeCompleted, Authority: ByExternalOwner, Data: json.RawMessage(`1`)}),
			Event{Type: TypeCompleted, Authority: ByExternalOwner, Data: json.RawMessage(`2`)}, ErrTerminal, false},
		{"a cancel request after the end", logOf(t, ext, Event{Type: TypeFailed, Authority: ByExternalOwner}),
			Event{Type: TypeCancelRequested}, ErrTerminal, false},
		{"a second cancel request", logOf(t, job, Event{Type: TypeCancelRequested, Data: json.RawMessage(`{"reason":"a"}`)}),
			Event{Type: TypeCancelRequested, Data: json.RawMessage(`{"reason":"b"}`)}, ErrConflict, false},
		{"abandon by drain", logOf(t, bound, started(5, 1)), Event{Type: TypeAbandoned, Token: 5, Data: abandon(OwnerDrain)}, nil, false},
		{"abandon by a sweep that reclaimed", logOf(t, bound, started(5, 1)), Event{Type: TypeAbandoned, Token: 8, Data: abandon(Sweep)}, nil, false},
		{"abandon by a sweep without the lease", logOf(t, bound, started(5, 1)), Event{Type: TypeAbandoned, Authority: ByReconciledRequest, Data: abandon(Sweep)}, ErrRefused, false},
		{"abandon without evidence", logOf(t, bound, started(5, 1)), Event{Type: TypeAbandoned, Token: 5, Data: jsonData(Abandonment{Writer: Sweep})}, ErrInvalid, false},
		{"reconciled abandon without a request", logOf(t, ext), Event{Type: TypeAbandoned, Authority: ByReconciledRequest, Data: abandon(ReconciledRequest)}, ErrRefused, false},
		{"reconciled abandon of external work", logOf(t, ext, Event{Type: TypeAbandonRequested}), Event{Type: TypeAbandoned, Authority: ByReconciledRequest, Data: abandon(ReconciledRequest)}, nil, false},
		{"reconciled abandon of owner-bound work without the lease", logOf(t, bound, started(5, 1), Event{Type: TypeAbandonRequested}),
			Event{Type: TypeAbandoned, Authority: ByReconciledRequest, Data: abandon(ReconciledRequest)}, ErrRefused, false},
		{"data that is not JSON", logOf(t, job, started(5, 1)), Event{Type: "progress", Token: 5, Data: json.RawMessage(`{`)}, ErrInvalid, false},
		{"data over the bound", logOf(t, job, started(5, 1)), Event{Type: "progress", Token: 5, Data: json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), MaxDataBytes)) + `"`)}, ErrInvalid, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := c.e
			dup, err := c.p.check(&e)
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("error %v, want %v", err, c.want)
			case dup != c.dup:
				t.Fatalf("duplicate %v, want %v", dup, c.dup)
			case err == nil && !dup && e.N != c.p.Events+1:
				t.Fatalf("numbered %d after %d events", e.N, c.p.Events)
			}
		})
	}
}

func TestEventLimit(t *testing.T) {
	p := logOf(t, Registration{Input: Input{Kind: ToolCall, Tool: "t"}, Disposition: Rerunnable, EventTypes: []string{"tick"}, Provenance: Provenance{Host: "h"}}, started(5, 1))
	p.Events = MaxEvents
	e := Event{Type: "tick", Token: 5}
	if _, err := p.check(&e); !errors.Is(err, ErrRefused) {
		t.Fatalf("an event past the limit: %v", err)
	}
	for _, e := range []Event{{Type: TypeCancelRequested}, {Type: TypeCompleted, Token: 5}} {
		if _, err := p.check(&e); err != nil {
			t.Fatalf("%s past the limit: %v", e.Type, err)
		}
	}
}

func TestFoldRefusesImpossibleLogs(t *testing.T) {
	reg := jsonData(Registration{Input: Input{Kind: External, ExternalRef: "r"}, Disposition: ExternallyOwned, Provenance: Provenance{Host: "h"}})
	job := jsonData(Registration{Input: Input{Kind: ToolCall, Tool: "t"}, Disposition: Rerunnable, Provenance: Provenance{Host: "h"}})
	logs := map[string][]Event{
		"a gap":                      {{N: 1, Type: TypeRegistered, Data: reg}, {N: 3, Type: TypeWaiting}},
		"no registration first":      {{N: 1, Type: TypeWaiting}},
		"two registrations":          {{N: 1, Type: TypeRegistered, Data: reg}, {N: 2, Type: TypeRegistered, Data: reg}},
		"two terminals":              {{N: 1, Type: TypeRegistered, Data: reg}, {N: 2, Type: TypeCompleted, Key: KeyTerminal}, {N: 3, Type: TypeFailed, Key: KeyTerminal}},
		"a terminal without its key": {{N: 1, Type: TypeRegistered, Data: reg}, {N: 2, Type: TypeCompleted}},
		"unreadable start":           {{N: 1, Type: TypeRegistered, Data: reg}, {N: 2, Type: TypeStarted, Data: json.RawMessage(`[]`)}},
		"external work started in its registration":  {{N: 1, Type: TypeRegistered, Data: reg, Token: 1, Start: &Start{Attempt: 1, Token: 1}}},
		"a registration's start under another token": {{N: 1, Type: TypeRegistered, Data: job, Token: 2, Start: &Start{Attempt: 1, Token: 1}}},
		"a registration's start of attempt 2":        {{N: 1, Type: TypeRegistered, Data: job, Token: 1, Start: &Start{Attempt: 2, Token: 1}}},
		"a start on another event":                   {{N: 1, Type: TypeRegistered, Data: job}, {N: 2, Type: TypeWaiting, Start: &Start{Attempt: 1, Token: 1}}},
	}
	for name, evs := range logs {
		if _, err := fold("p", evs); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: fold = %v, want ErrCorrupt", name, err)
		}
	}
	// A registration that starts attempt 1, as its runner writes it.
	p, err := fold("p", []Event{{N: 1, Type: TypeRegistered, Data: job, Token: 1, Start: &Start{Owner: Owner{Node: "n"}, Attempt: 1, Token: 1}}})
	if err != nil || !p.InAttempt() || p.Attempts() != 1 || p.Token != 1 || p.Status() != Running {
		t.Errorf("a registration with its start: %+v, %v; want attempt 1 running under token 1", p, err)
	}
	if _, err := fold("p", nil); !errors.Is(err, ErrUnknown) {
		t.Errorf("an empty log: %v, want ErrUnknown", err)
	}
}

func TestRegistrationHashIgnoresSpelling(t *testing.T) {
	a := Registration{Input: Input{Kind: ToolCall, Tool: "t", Args: json.RawMessage(`{ "a" : 1 }`)}, Disposition: Rerunnable,
		EventTypes: []string{"b", "a", "b"}, Provenance: Provenance{Host: "h"}}
	b := a
	b.Input.Args, b.EventTypes = json.RawMessage(`{"a":1}`), []string{"a", "b"}
	ha, _ := a.Hash()
	hb, _ := b.Hash()
	b.Label = "other"
	hc, _ := b.Hash()
	if ha != hb || ha == hc {
		t.Fatalf("hashes %s %s %s: want the first two equal, the third not", ha, hb, hc)
	}
}

// FuzzFold: no log, however malformed, panics the fold or a check on it.
func FuzzFold(f *testing.F) {
	f.Add([]byte(`{"v":1,"n":1,"type":"registered","data":{"input":{"kind":"external","external_ref":"r"},"disposition":"externally_owned","provenance":{"host":"h"}}}`),
		[]byte(`{"v":1,"n":2,"type":"completed","key":"terminal","authority":"external_owner"}`))
	f.Add([]byte(`{"v":1,"n":1,"type":"registered","data":null}`), []byte(`{"v":1,"n":2,"type":"started","token":3,"data":{"attempt":1}}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var evs []Event
		for i, raw := range [][]byte{a, b} {
			e, err := Decode(raw, uint64(i+1))
			if err != nil {
				return
			}
			evs = append(evs, e)
		}
		p, err := fold("p", evs)
		if err != nil {
			return
		}
		for _, typ := range []string{TypeStarted, TypeCompleted, TypeAbandoned, TypeCancelRequested, "x"} {
			e := Event{Type: typ, Token: p.Token + 1, Data: b}
			_, _ = p.check(&e)
		}
		_ = p.Status()
	})
}

// An empty tool list survives the log: a sub-agent given no tools is not
// read back as one given all.
func TestEmptyToolsSurvive(t *testing.T) {
	reg := Registration{Input: Input{Kind: SessionTurn, Session: "c", Instructions: "x", Depth: 1, Tools: []string{}},
		Disposition: Rerunnable, Provenance: Provenance{Session: "s"}}
	p := logOf(t, reg)
	if p.Registration.Input.Tools == nil {
		t.Fatal("an empty tool list came back as none (all tools)")
	}
	all := reg
	all.Input.Tools = nil
	if p := logOf(t, all); p.Registration.Input.Tools != nil {
		t.Fatal("no tool list came back as an empty one")
	}
	h1, _ := reg.Hash()
	h2, _ := all.Hash()
	if h1 == h2 {
		t.Fatal("no tools and all tools hash alike")
	}
}
