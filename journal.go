package lash

import (
	"fmt"
	"time"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// JournalVersion names how the driver journals a turn. It is part of the
// turn settings (Settings.Journal), so a node never replays a turn whose
// journal another version wrote. 1: every effect has its record and every
// tool call its intent. 3: a model answer's record stands for the intents
// of the calls it asks for (ADR 0017). 4: besides, the checkpoint right
// after a model answer without tool calls, or after a round of one call,
// is answered in that answer's record (answer.Next). 5: a tool round
// stopped by a cancel input claims each call it stopped with a cancel on
// the call's own key, instead of one cancel on the round's key, which a
// run whose calls had all returned would not see. 2 left a turn's empty
// checkpoints unrecorded and was withdrawn: a run that lost its lease could
// then take an input at a checkpoint the committed turn passed empty and
// act on it.
const JournalVersion = 5

// answer is the journaled form of any effect's answer. One shape for all
// kinds keeps the codec small; the effect's kind says which fields count.
type answer struct {
	Tools     []turn.ToolSpec     `msgpack:"tools,omitempty"`
	Response  *turn.ModelResponse `msgpack:"resp,omitempty"`
	CallErr   *turn.CallError     `msgpack:"err,omitempty"`
	Result    *turn.ToolResult    `msgpack:"res,omitempty"`
	Messages  []turn.Message      `msgpack:"msgs,omitempty"`
	Decisions []turn.Decision     `msgpack:"decs,omitempty"`
	TimedOut  bool                `msgpack:"to,omitempty"`
	// Cursor is the last input a checkpoint or wait consumed.
	Cursor uint64  `msgpack:"cur,omitempty"`
	Cancel *string `msgpack:"cancel,omitempty"`
	// Took is how long performing the effect took, for operators; replay
	// ignores it.
	Took time.Duration `msgpack:"took,omitempty"`
	// Refused names the inputs a checkpoint or wait consumed without taking
	// them, and why, for operators.
	Refused []string `msgpack:"refused,omitempty"`
	// Request is the request as lines (renderRequest), so that verify can
	// show how a changed request differs; replay ignores it.
	Request string `msgpack:"req,omitempty"`
	// Inputs are the inputs a checkpoint, a wait or an interrupt consumed,
	// with their keys, for the turn's commit.
	Inputs []sessionlog.InputUse `msgpack:"in,omitempty"`
	// Next is the answer of the checkpoint the machine asks for right
	// after this effect, read before this record was written and stored
	// with it: a round costs one write less, and as the answer lives in
	// the only record its effect can have, no run finds another one.
	Next *answer `msgpack:"next,omitempty"`
	// End is a program's end (turn.ExecCode), recorded under its origin.
	End *programEnd `msgpack:"end,omitempty"`
}

// answersNext says whether the record of a model answer carries the
// answer of the checkpoint after it: the machine asks for one after an
// answer without tool calls (and for none after a cancel or an error).
func answersNext(a *answer) bool {
	return a.Response != nil && len(a.Response.ToolCalls) == 0 && a.Cancel == nil && a.CallErr == nil
}

func decodeAnswer(b []byte) (*answer, error) {
	var a answer
	if err := msgpack.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("lash: unreadable journal record: %w", err)
	}
	return &a, nil
}

// result turns a journaled answer back into the result the machine takes.
func (a *answer) result(kind turn.Kind, id turn.EffectID) (turn.Result, error) {
	if a.Cancel != nil {
		return turn.Cancel{ID: id, Reason: *a.Cancel}, nil
	}
	switch kind {
	case turn.KindSyncTools:
		return turn.ToolsSynced{ID: id, Tools: a.Tools}, nil
	case turn.KindLLMCall:
		return turn.LLMResult{ID: id, Response: a.Response, Err: a.CallErr}, nil
	case turn.KindCheckpoint:
		return turn.CheckpointResult{ID: id, Messages: a.Messages, Decisions: a.Decisions}, nil
	case turn.KindSleep:
		return turn.SleepDone{ID: id}, nil
	case turn.KindAwaitEvent:
		return turn.EventResult{ID: id, TimedOut: a.TimedOut, Messages: a.Messages, Decisions: a.Decisions}, nil
	case turn.KindExecCode:
		if a.End != nil {
			return turn.ExecResult{ID: id, End: &turn.ProgramEnd{Output: a.End.Output, Failed: a.End.Failed}}, nil
		}
	}
	return nil, fmt.Errorf("lash: no journaled answer form for %s", kind)
}
