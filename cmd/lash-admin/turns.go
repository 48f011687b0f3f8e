package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/streams"
)

var turnsCmd = &command{
	name:    "turns",
	args:    "ID",
	summary: "a session's committed turns: status, duration, tokens",
	doc: `Lists a session's committed turns in commit order, read from its log: the turn id
("in-<input sequence>"), the revision of its commit, status and termination, how long
it took from its input to its commit (by the server's clock), tokens (input+output),
model calls (iterations), messages, calls left suspended, the node run
(node/incarnation) that committed it, and the fingerprint of the turn settings it ran
under ("lash-admin settings ID TURN" prints them). A turn committed as failed (it could
never succeed) shows its code and cause as its termination.`,
	min: 1, max: 1,
	run: runTurns,
}

type turnJSON struct {
	Turn        string          `json:"turn"`
	Seq         uint64          `json:"seq"`
	Input       uint64          `json:"input"`
	Cursor      uint64          `json:"cursor"`
	Status      string          `json:"status"`
	Termination terminationJSON `json:"termination"`
	Usage       usageJSON       `json:"usage"`
	Iterations  int             `json:"iterations"`
	Messages    int             `json:"messages"`
	Suspended   int             `json:"suspended"`
	Committer   string          `json:"committer"`
	// Started is when the turn's input was appended, null once the input
	// is gone; DurationMS runs from then to the commit (0 without it).
	Started    *time.Time `json:"started"`
	Committed  time.Time  `json:"committed"`
	DurationMS float64    `json:"duration_ms"`
	// Settings is the fingerprint of the turn settings it ran under;
	// Failed is set on a turn committed as failed.
	Settings string `json:"settings"`
	Failed   bool   `json:"failed"`
	// SetAside, on a commit of status "set_aside", says why no run of the
	// session could have written it.
	SetAside string `json:"set_aside,omitempty"`
}

type turnsJSON struct {
	Session string     `json:"session"`
	Turns   []turnJSON `json:"turns"`
}

// turns lists a session's committed turns; a session with inputs but no
// log yet has none, one with neither is unknown.
func (a *app) turns(id string) ([]lash.TurnSummary, error) {
	ts, err := lash.NewInspector(a.client).Turns(a.ctx, id)
	if errors.Is(err, lash.ErrUnknownSession) {
		known, kerr := a.known(id)
		if kerr != nil {
			return nil, kerr
		}
		if !known {
			return nil, unknownSession(id)
		}
		return nil, nil
	}
	return ts, err
}

// logAndInputs are a session's log subject and its input subjects.
func (a *app) logAndInputs(id string) ([]string, error) {
	ev, err := a.client.Subjects().SessionEvents(id)
	if err != nil {
		return nil, err
	}
	in, err := a.client.Subjects().SessionInputChannels(id)
	if err != nil {
		return nil, err
	}
	return append([]string{ev}, in...), nil
}

// known reports whether the session has a log or inputs.
func (a *app) known(id string) (bool, error) {
	subjects, err := a.logAndInputs(id)
	if err != nil {
		return false, err
	}
	for _, subj := range subjects {
		_, err := a.client.Head(a.ctx, subj)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, streams.ErrNotFound) {
			return false, err
		}
	}
	return false, nil
}

func runTurns(a *app, args []string) error {
	ts, err := a.turns(args[0])
	if err != nil {
		return err
	}
	out := turnsJSON{Session: args[0], Turns: []turnJSON{}}
	for _, t := range ts {
		out.Turns = append(out.Turns, turnJSON{Turn: t.Turn, Seq: t.Seq, Input: t.Input, Cursor: t.Cursor, Status: t.Status,
			Termination: terminationOf(t.Termination), Usage: usageOf(t.Usage), Iterations: t.Iterations,
			Messages: t.Messages, Suspended: t.Suspended, Committer: t.Committer, Started: optTime(t.Started),
			Committed: utc(t.Committed), DurationMS: ms(t.Duration), Settings: t.Settings, Failed: t.Failed, SetAside: t.SetAside})
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "TURN", "SEQ", "STATUS", "TERMINATION", "DURATION", "TOKENS", "ITER", "MSGS", "SUSP", "COMMITTER", "COMMITTED", "SETTINGS")
		for _, t := range ts {
			row(w, t.Turn, t.Seq, t.Status, fmtTermination(t.Termination), fmtDuration(t.Duration), fmtUsage(t.Usage),
				t.Iterations, t.Messages, t.Suspended, t.Committer, fmtTime(t.Committed), t.Settings[:min(len(t.Settings), 12)])
		}
	})
}

// checkTurn reads a turn argument: a turn id, or the sequence of the
// input that started it.
func (a *app) checkTurn(arg string) error {
	if arg == "" {
		return a.usagef("the turn id is empty")
	}
	a.turnArg = arg
	for _, r := range arg {
		if r < '0' || r > '9' {
			return nil
		}
	}
	a.turnArg = "in-" + arg
	return nil
}

var settingsCmd = &command{
	name:    "settings",
	args:    "ID TURN",
	summary: "the turn settings a committed turn ran under",
	doc: `Prints the turn settings a committed turn ran under (model, system prompt, sampling,
limits, decision wait, grace prompt, label), read from the object store by the
fingerprint its commit carries. TURN is a turn id or the sequence of its input.`,
	min: 2, max: 2,
	check: func(a *app, args []string) error { return a.checkTurn(args[1]) },
	run:   runSettings,
}

type settingsJSON struct {
	Session     string        `json:"session"`
	Turn        string        `json:"turn"`
	Fingerprint string        `json:"fingerprint"`
	Settings    lash.Settings `json:"settings"`
}

func runSettings(a *app, args []string) error {
	ts, err := a.turns(args[0])
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.Turn != a.turnArg {
			continue
		}
		if t.Settings == "" {
			return fmt.Errorf("session %s: turn %s names no turn settings (committed by an older version)", args[0], t.Turn)
		}
		s, err := lash.NewInspector(a.client).Settings(a.ctx, t.Settings)
		if err != nil {
			return err
		}
		out := settingsJSON{Session: args[0], Turn: t.Turn, Fingerprint: t.Settings, Settings: s}
		return a.emit(out, func(w io.Writer) {
			data, _ := json.MarshalIndent(s, "", "  ")
			fmt.Fprintf(w, "session %s, turn %s: settings %s\n%s\n", args[0], t.Turn, t.Settings, data)
		})
	}
	return fmt.Errorf("session %s has no committed turn %s", args[0], a.turnArg)
}
