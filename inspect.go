package lash

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
)

// Inspector reads a deployment's sessions and journals for operators,
// straight from the streams: it needs no model and runs no turn.
type Inspector struct {
	c       *streams.Client
	journal *effectlog.Journal
	log     *sessionlog.Log
	ceiling *ceiling
	// programs replays programs for verify.
	programs programs
}

// NewInspector reads the deployment c belongs to.
func NewInspector(c *streams.Client) *Inspector {
	b := newBlobStore(c)
	return &Inspector{c: c, journal: effectlog.New(c, effectlog.WithBlobs(b)), log: sessionlog.New(c, sessionlog.WithBlobs(turnBlobs(b))),
		ceiling: &ceiling{c: c}}
}

// Settings reads the turn settings whose fingerprint (hex) fences, commits
// and records carry.
func (i *Inspector) Settings(ctx context.Context, fingerprint string) (Settings, error) {
	return LoadSettings(ctx, i.c, fingerprint)
}

// body reads a commit's body, from the object store if need be.
func (i *Inspector) body(ctx context.Context, session string, e *sessionlog.Entry) (*sessionlog.TurnBody, error) {
	data, err := i.log.Body(ctx, session, e)
	if err != nil {
		return nil, err
	}
	return sessionlog.DecodeTurnBody(data)
}

// TurnSummary is one committed turn as an operator sees it.
type TurnSummary struct {
	Turn string `json:"turn"`
	// Seq is the commit's revision on the session log; Input the input
	// that started the turn, and Cursor the last input it consumed.
	Seq         uint64           `json:"seq"`
	Input       uint64           `json:"input"`
	Cursor      uint64           `json:"cursor"`
	Status      string           `json:"status"`
	Termination turn.Termination `json:"termination"`
	Usage       turn.Usage       `json:"usage"`
	Iterations  int              `json:"iterations"`
	Messages    int              `json:"messages"`
	Suspended   int              `json:"suspended"`
	// Committer names the node run (node/incarnation) that committed it.
	Committer string `json:"committer"`
	// Started is when its input was appended, Committed when the commit
	// landed, both by the server's clock.
	Started   time.Time     `json:"started"`
	Committed time.Time     `json:"committed"`
	Duration  time.Duration `json:"duration"`
	// Settings is the fingerprint (hex) of the turn settings the committer
	// ran; Failed is set on a turn committed as failed.
	Settings string `json:"settings,omitempty"`
	Failed   bool   `json:"failed,omitempty"`
	// SetAside, on a commit with Status TurnSetAside, says why no run of
	// the session could have written it: it is no turn of the session.
	SetAside string `json:"set_aside,omitempty"`
}

// TurnSetAside is the status of a commit no run could have written
// (TurnSummary.SetAside).
const TurnSetAside = "set_aside"

// logEntry is one readable entry of a session log with its stream time.
type logEntry struct {
	seq   uint64
	at    time.Time
	entry *sessionlog.Entry
	// setAside says why no lease could have written the entry (ADR 0027,
	// 0036): it is shown as such and folded by no one.
	setAside string
}

// readLog reads a session's log; entries that cannot be read are passed
// over, as the driver does. An empty log is ErrUnknownSession.
func (i *Inspector) readLog(ctx context.Context, session string) ([]logEntry, error) {
	subj, err := i.c.Subjects().SessionEvents(session)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	var out []logEntry
	err = i.c.Read(ctx, subj, 0, func(m *streams.Msg) error {
		e, err := sessionlog.DecodeEntry(m.Data)
		if err != nil {
			return nil // not an entry: nothing to show
		}
		le := logEntry{seq: m.Seq, at: m.Time, entry: e}
		if err := i.c.Verify(m); err != nil {
			le.setAside = "not signed by the deployment"
		} else if ok, err := i.ceiling.plausible(ctx, e.Token); err != nil {
			return err
		} else if !ok {
			le.setAside = "its fencing token is above every lease's"
		}
		out = append(out, le)
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("%w: %s", ErrUnknownSession, session)
	}
	return out, err
}

// Running reports whether a node holds the session's lease: a turn of it
// runs now.
func (i *Inspector) Running(ctx context.Context, session string) (bool, error) {
	return sessionRunning(ctx, leases.New(i.c, leases.Owner{ID: "inspector"}), session)
}

func sessionRunning(ctx context.Context, m *leases.Manager, session string) (bool, error) {
	key, err := leases.Key("sess", session)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	h, err := m.Get(ctx, key)
	return h != nil, err
}

// ErrUnknownSession: the session has no log.
var ErrUnknownSession = fmt.Errorf("lash: unknown session")

// Turns lists a session's committed turns in commit order.
func (i *Inspector) Turns(ctx context.Context, session string) ([]TurnSummary, error) {
	entries, err := i.readLog(ctx, session)
	if err != nil {
		return nil, err
	}
	holders := map[uint64]string{}
	var out []TurnSummary
	for _, le := range entries {
		e := le.entry
		switch {
		case le.setAside != "" && e.Kind == sessionlog.KindCommit:
			out = append(out, TurnSummary{Turn: e.Turn, Seq: le.seq, Status: TurnSetAside, SetAside: le.setAside, Committed: le.at})
			continue
		case le.setAside != "":
			continue
		}
		switch e.Kind {
		case sessionlog.KindFence:
			holders[e.Token] = e.Owner
		case sessionlog.KindCommit:
			b, err := i.body(ctx, session, e)
			if err != nil {
				continue
			}
			ts := TurnSummary{Turn: e.Turn, Seq: le.seq, Cursor: b.InputCursor, Status: b.Outcome.Status.String(),
				Termination: b.Outcome.Termination, Usage: b.Outcome.Usage, Iterations: b.Outcome.Iterations,
				Messages: len(b.Outcome.Messages), Suspended: len(b.Outcome.Suspended),
				Committer: holders[e.Token], Committed: le.at, Settings: hex.EncodeToString(e.Settings),
				Failed: failedTurn(&b.Outcome)}
			if seq, ok := turnInput(e.Turn); ok {
				ts.Input = seq
				if m, err := i.log.InputAt(ctx, session, seq); err == nil {
					ts.Started = m.Time
					ts.Duration = le.at.Sub(m.Time)
				}
			}
			out = append(out, ts)
		}
	}
	return out, nil
}

// failedTurn reports whether a turn was committed as failed.
func failedTurn(o *turn.Outcome) bool {
	switch o.Termination.Code {
	case FailNondeterminism, FailUnreadableJournal, FailInvalidResult, FailSettingsChanged, FailAttempts, FailTooLarge:
		return o.Termination.Reason == turn.Error
	}
	return false
}

// turnInput reads the input sequence out of a turn id ("in-<seq>").
func turnInput(turnID string) (uint64, bool) {
	s, ok := strings.CutPrefix(turnID, "in-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// JournalEntry is one recorded effect of a turn.
type JournalEntry struct {
	Key  turn.ReplayKey `json:"-"`
	Name string         `json:"key"`
	Kind string         `json:"kind"`
	Call string         `json:"call,omitempty"`
	Hash string         `json:"hash"`
	// Summary says what the outcome was, in a line.
	Summary string `json:"summary"`
	Failed  bool   `json:"failed,omitempty"`
	// Recorder is the node that performed and recorded the effect, Run its
	// node/incarnation.
	Recorder   string        `json:"recorder"`
	Run        string        `json:"run"`
	RecordedAt time.Time     `json:"recorded_at"`
	Took       time.Duration `json:"took"`
	// Replayed is set when the run that committed the turn took this
	// outcome from the journal, recorded by an earlier run; Executed when
	// that run performed it. Neither is set while the turn is uncommitted.
	Replayed bool `json:"replayed"`
	Executed bool `json:"executed"`
	// In names the record that holds this checkpoint's answer, when it is
	// the record of the effect before it (ADR 0017); Hash is then empty.
	// Such an entry comes from that record alone: it is listed also when
	// a hook ended the turn before the checkpoint.
	In string `json:"in,omitempty"`
	// InDoubt marks a tool call of an uncommitted turn that a run started
	// (an intent, or the recorded answer that asked for it) without an
	// outcome recorded: running now, or in doubt if that run is gone.
	// Such an entry has no hash; RecordedAt is when it was started.
	InDoubt bool `json:"in_doubt,omitempty"`
}

// Journal lists the recorded effects of a turn in the order they were
// recorded.
func (i *Inspector) Journal(ctx context.Context, session, turnID string) ([]JournalEntry, error) {
	entries, err := i.readLog(ctx, session)
	if err != nil {
		return nil, err
	}
	holders := map[uint64]string{}
	committer := ""
	for _, le := range entries {
		if le.setAside != "" {
			continue
		}
		switch le.entry.Kind {
		case sessionlog.KindFence:
			holders[le.entry.Token] = le.entry.Owner
		case sessionlog.KindCommit:
			if le.entry.Turn == turnID {
				committer = holders[le.entry.Token]
			}
		}
	}
	recs, err := i.journal.Load(ctx, session, turnID)
	if err != nil {
		return nil, err
	}
	out := make([]JournalEntry, 0, len(recs))
	for _, r := range recs {
		je := JournalEntry{Key: r.Key, Name: r.Key.String(), Kind: r.Key.Kind.String(), Call: r.Key.Call,
			Hash: r.Hash.String(), Run: r.Recorder, RecordedAt: r.At, Failed: r.Outcome.Failed}
		je.Recorder, _, _ = strings.Cut(r.Recorder, "/")
		je.Summary, je.Took = summarize(r)
		if committer != "" {
			je.Executed = r.Recorder == committer
			je.Replayed = !je.Executed
		}
		out = append(out, je)
		if a, err := decodeAnswer(r.Outcome.Data); err == nil && a.Next != nil && !r.Outcome.Failed {
			next := je
			next.Key = turn.ReplayKey{Session: r.Key.Session, Turn: r.Key.Turn, Iteration: r.Key.Iteration, Kind: turn.KindCheckpoint, Effect: r.Key.Effect + 1}
			next.Name, next.Kind, next.Call, next.Hash, next.In = next.Key.String(), next.Key.Kind.String(), "", "", je.Name
			next.Summary, next.Took = summarizeAnswer(next.Key, a.Next)
			out = append(out, next)
		}
	}
	if committer == "" {
		started, err := i.started(ctx, session, turnID, recs)
		if err != nil {
			return nil, err
		}
		out = append(out, started...)
	}
	return out, nil
}

// started lists the tool calls of a turn that a run started without an
// outcome recorded: those with an intent, and those a recorded answer
// asked for and so stood for the intents of (effectlog's Intends).
func (i *Inspector) started(ctx context.Context, session, turnID string, recs []*effectlog.Record) ([]JournalEntry, error) {
	type call struct {
		effect uint64
		id     string
	}
	recorded := map[call]bool{}
	asked := map[call]*effectlog.Record{} // the answer that asked for a call
	names := map[call]string{}
	iterations := map[uint64]int{} // by effect
	for _, r := range recs {
		recorded[call{uint64(r.Key.Effect), r.Key.Call}] = true
		iterations[uint64(r.Key.Effect)] = r.Key.Iteration
		if r.Outcome.Failed {
			continue
		}
		if a, err := decodeAnswer(r.Outcome.Data); err == nil && a.Response != nil {
			for _, c := range a.Response.ToolCalls {
				k := call{uint64(r.Key.Effect) + 1, c.ID}
				names[k] = c.Name
				if r.Outcome.Intends {
					asked[k] = r
				}
			}
		}
	}
	intents, err := i.journal.Intents(ctx, session, turnID)
	if err != nil {
		return nil, err
	}
	var out []JournalEntry
	add := func(k call, run string, at time.Time, why string) {
		if recorded[k] {
			return
		}
		recorded[k] = true
		// A batch's calls share the iteration of the answer before them.
		key := turn.ReplayKey{Session: session, Turn: turnID, Iteration: iterations[k.effect-1], Kind: turn.KindToolCall, Effect: turn.EffectID(k.effect), Call: k.id}
		je := JournalEntry{Key: key, Name: key.String(), Kind: key.Kind.String(), Call: k.id, Run: run, RecordedAt: at, InDoubt: true,
			Summary: fmt.Sprintf("%s %s; no outcome recorded: running, or in doubt if that run is gone", names[k], why)}
		je.Recorder, _, _ = strings.Cut(run, "/")
		out = append(out, je)
	}
	for _, in := range intents {
		add(call{in.Effect, in.Call}, in.Recorder, in.At, "started by "+in.Recorder)
	}
	for k, r := range asked {
		add(k, r.Recorder, r.At, "asked for in the answer "+r.Recorder+" recorded")
	}
	slices.SortFunc(out, func(x, y JournalEntry) int {
		return cmp.Or(cmp.Compare(x.Key.Effect, y.Key.Effect), cmp.Compare(x.Call, y.Call))
	})
	return out, nil
}

// summarize says in a line what a record holds.
func summarize(r *effectlog.Record) (string, time.Duration) {
	if r.Outcome.Failed {
		return "failed: " + r.Outcome.Error, 0
	}
	a, err := decodeAnswer(r.Outcome.Data)
	if err != nil {
		return "unreadable: " + err.Error(), 0
	}
	return summarizeAnswer(r.Key, a)
}

func summarizeAnswer(key turn.ReplayKey, a *answer) (string, time.Duration) {
	clip := func(s string) string {
		s = strings.Join(strings.Fields(s), " ")
		if len(s) > 80 {
			s = s[:77] + "..."
		}
		return s
	}
	var s string
	switch {
	case a.Cancel != nil:
		s = "cancelled: " + *a.Cancel
	case a.Response != nil:
		var calls []string
		for _, c := range a.Response.ToolCalls {
			calls = append(calls, c.Name)
		}
		if len(calls) > 0 {
			s = "calls " + strings.Join(calls, ", ")
		} else {
			s = "says " + strconv.Quote(clip(a.Response.Text))
		}
		s += fmt.Sprintf(" (%d+%d tokens)", a.Response.Usage.InputTokens, a.Response.Usage.OutputTokens)
	case a.CallErr != nil:
		s = "model error: " + clip(a.CallErr.Message)
	case a.Result != nil:
		s = a.Result.Status.String() + ": " + strconv.Quote(clip(a.Result.Output))
	case a.End != nil:
		s = "program ended"
		if a.End.Failed {
			s = "program failed"
		}
		s += ": " + strconv.Quote(clip(a.End.Output))
	case key.Kind == turn.KindProgramCall:
		s = "slept"
	case key.Kind == turn.KindSyncTools:
		s = fmt.Sprintf("%d tools", len(a.Tools))
	case key.Kind == turn.KindAwaitEvent && a.TimedOut:
		s = "timed out"
	default:
		s = fmt.Sprintf("%d messages, %d decisions", len(a.Messages), len(a.Decisions))
		if len(a.Refused) > 0 {
			s += fmt.Sprintf("; refused %s", strings.Join(a.Refused, "; "))
		}
	}
	return s, a.Took
}
