package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lash-run/lash"
)

var effectsCmd = &command{
	name:    "effects",
	args:    "ID TURN",
	summary: "a turn's journal: each recorded effect, replayed or executed",
	doc: `Lists the effects a turn recorded in the journal, in the order they were recorded: the
replay key (iteration/kind/effect[/call]), the kind, the request hash (short), what the
outcome was, whether the run that committed the turn replayed it from the journal or
executed it, the node that recorded it, how long it took and when it was recorded.
A checkpoint right after a model answer without tool calls, or after a round of one
tool call, is answered in that effect's record: it shows with no hash of its own, and
its "in" names the record (--json). It is listed from that record, also when a hook ended
the turn before the checkpoint came. While the turn is uncommitted, each tool call a run
started (an intent, or the recorded answer that asked for it) without an outcome recorded
is listed as "started" ("in_doubt" in JSON): running, or in doubt if that run is gone.
TURN is a turn id ("in-7") or the sequence of the input that started it ("7").`,
	min: 2, max: 2,
	check: func(a *app, args []string) error { return a.checkTurn(args[1]) },
	run:   runEffects,
}

type effectJSON struct {
	Key        string    `json:"key"`
	Kind       string    `json:"kind"`
	Call       string    `json:"call"`
	Hash       string    `json:"hash"`
	Summary    string    `json:"summary"`
	Failed     bool      `json:"failed"`
	Replayed   bool      `json:"replayed"`
	Executed   bool      `json:"executed"`
	Recorder   string    `json:"recorder"`
	Run        string    `json:"run"`
	TookMS     float64   `json:"took_ms"`
	RecordedAt time.Time `json:"recorded_at"`
	In         string    `json:"in,omitempty"`
	InDoubt    bool      `json:"in_doubt"`
}

type effectsJSON struct {
	Session   string       `json:"session"`
	Turn      string       `json:"turn"`
	Committed bool         `json:"committed"`
	Effects   []effectJSON `json:"effects"`
}

func runEffects(a *app, args []string) error {
	id, tid := args[0], a.turnArg
	ts, err := a.turns(id)
	if err != nil {
		return err
	}
	committed := false
	for _, t := range ts {
		committed = committed || t.Turn == tid
	}
	js, err := lash.NewInspector(a.client).Journal(a.ctx, id, tid)
	if err != nil {
		return err
	}
	if len(js) == 0 && !committed {
		return notFound(fmt.Sprintf("session %s has no turn %s", id, tid))
	}
	out := effectsJSON{Session: id, Turn: tid, Committed: committed, Effects: []effectJSON{}}
	for _, j := range js {
		out.Effects = append(out.Effects, effectJSON{Key: j.Name, Kind: j.Kind, Call: j.Call, Hash: j.Hash, Summary: j.Summary,
			Failed: j.Failed, Replayed: j.Replayed, Executed: j.Executed, Recorder: j.Recorder, Run: j.Run,
			TookMS: ms(j.Took), RecordedAt: utc(j.RecordedAt), In: j.In, InDoubt: j.InDoubt})
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "KEY", "KIND", "HASH", "OUTCOME", "RUN", "RECORDER", "TOOK", "RECORDED AT")
		for _, j := range js {
			run := "-" // the turn is not committed yet
			switch {
			case j.Replayed:
				run = "replayed"
			case j.Executed:
				run = "executed"
			case j.InDoubt:
				run = "started"
			}
			hash := j.Hash[:min(8, len(j.Hash))]
			if j.In != "" {
				hash = "(above)"
			}
			row(w, shortKey(j.Name, id, tid), j.Kind, hash, clip(j.Summary, 72), run, j.Recorder,
				fmtDuration(j.Took), fmtTime(j.RecordedAt))
		}
		if len(js) == 0 {
			fmt.Fprintf(w, "(turn %s is committed; its journal is empty: purged, or older than the journal's retention)\n", tid)
		}
	})
}

// shortKey drops the session and turn a replay key starts with.
func shortKey(key, session, turn string) string {
	return strings.TrimPrefix(key, session+"/"+turn+"/")
}
