package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
)

// History is what the checker reads: what the clients saw (the workload),
// what the tool and the model server saw, and the streams.
type History struct {
	Client   *streams.Client
	API      *nodeapi.Client
	Workload *Workload
	Tools    []Execution
	Models   []testenv.RequestRecord
	// Grace is how late a request sent before its outcome was recorded
	// may still arrive: a healed partition delivers what it held, and a
	// NATS client sends what it buffered while reconnecting.
	Grace time.Duration
	// Resumes are when paused nodes were resumed: a model request a node
	// had made ready before its pause goes out then, before the node sees
	// its lease is gone. No fence stands between a node and an HTTP call.
	Resumes []time.Time
}

// resumeGrace is how soon after its resume a paused node's request is
// taken for one it made ready before the pause.
const resumeGrace = 2 * time.Second

// Verdict is the checker's finding: the counts it checked and every
// violation, each in a line that names the session and what broke.
type Verdict struct {
	Sessions, Inputs, Turns, Fences int
	ToolExecutions, ToolRecords     int
	ModelRequests, ModelRecords     int
	Processes, TriggerSignals       int
	InDoubtReruns, StaleDeliveries  int
	// ClientRetries counts publishes clients sent again after a timeout.
	ClientRetries int
	// Takeovers counts fences that followed another run's fence with no
	// commit between: a run cut short.
	Takeovers int
	// ToldTwice counts process ends a session heard of both through its
	// await and as a notice.
	ToldTwice  int
	Violations []string
	// Commits are the commit times of every turn, and Spans each
	// acknowledged input's wait, for the figures.
	Commits []time.Time `json:"-"`
	Spans   []Span      `json:"-"`

	triggerProcs map[string][]string
	// logs are each session's log as lines, to explain a violation.
	logs map[string]string
}

// Span is an input from its acknowledgement to the commit of the turn
// that consumed it (zero if none did).
type Span struct{ Acked, Consumed time.Time }

func (v *Verdict) violate(format string, args ...any) {
	v.Violations = append(v.Violations, fmt.Sprintf(format, args...))
}

// Check reads everything back and checks the properties lash promises.
func Check(ctx context.Context, h History) *Verdict {
	v := &Verdict{triggerProcs: map[string][]string{}, logs: map[string]string{}}
	insp := lash.NewInspector(h.Client)
	j := &journals{c: h.Client, insp: insp, log: effectlog.New(h.Client), v: v,
		recorded: map[string]time.Time{}, llm: map[string][]llmRecord{}, loaded: map[string]bool{}}
	for _, s := range h.Workload.Sessions() {
		v.Sessions++
		if s.Err != "" {
			v.violate("%s (%s): the client gave up: %s", s.ID, s.Kind, s.Err)
		}
		v.Inputs += len(s.Inputs)
		v.ClientRetries += s.Retries
		checkSession(ctx, v, insp, h, s)
		j.load(ctx, s.ID)
	}
	procEnds := checkProcesses(ctx, v, h)
	checkTools(ctx, v, h, j, procEnds)
	checkModels(v, h, j.llm)
	checkTriggers(v, h)
	slices.SortFunc(v.Commits, func(a, b time.Time) int { return a.Compare(b) })
	return v
}

// journals reads sessions' journals once each: when each record was
// stored, by the server's clock, per replay key, and the model calls'
// records of each session in order.
type journals struct {
	c        *streams.Client
	insp     *lash.Inspector
	log      *effectlog.Journal
	v        *Verdict
	recorded map[string]time.Time
	llm      map[string][]llmRecord
	loaded   map[string]bool
}

func (j *journals) load(ctx context.Context, session string) {
	if j.loaded[session] {
		return
	}
	j.loaded[session] = true
	turns, err := j.insp.Turns(ctx, session)
	if err != nil {
		j.v.violate("%s: turns: %v", session, err)
		return
	}
	for _, t := range turns {
		times, err := recordTimes(ctx, j.c, session, t.Turn)
		if err != nil {
			j.v.violate("%s: reading the journal of %s: %v", session, t.Turn, err)
			continue
		}
		recs, err := j.log.Load(ctx, session, t.Turn)
		if err != nil {
			j.v.violate("%s: loading the journal of %s: %v", session, t.Turn, err)
			continue
		}
		for _, r := range recs {
			at, ok := times[r.Seq]
			if !ok {
				continue
			}
			j.recorded[r.Key.String()] = at
			j.v.ToolRecords += boolInt(r.Key.Kind == turn.KindToolCall)
			if r.Key.Kind == turn.KindLLMCall {
				j.v.ModelRecords++
				j.llm[session] = append(j.llm[session], llmRecord{r.Key.String(), at, r.Recorder})
			}
		}
	}
}

// llmRecord is a model call's record: its key, and when it was stored.
type llmRecord struct {
	key      string
	at       time.Time
	recorder string
}

// checkSession checks one session's log and transcript against what its
// client was acknowledged.
func checkSession(ctx context.Context, v *Verdict, insp *lash.Inspector, h History, s *Session) {
	subj, err := h.Client.Subjects().SessionEvents(s.ID)
	if err != nil {
		v.violate("%s: %v", s.ID, err)
		return
	}
	// Fencing: tokens only grow, and every commit carries the token of the
	// newest fence before it, so no write of a fenced-out holder landed.
	var token uint64
	turnIDs := map[string]bool{}
	var lines strings.Builder
	var lastKind sessionlog.Kind
	var lastOwner string
	err = h.Client.Read(ctx, subj, 0, func(m *streams.Msg) error {
		defer func() { lastKind = sessionlogKind(m.Data) }()
		e, err := sessionlog.DecodeEntry(m.Data)
		if err != nil {
			v.violate("%s: entry %d unreadable: %v", s.ID, m.Seq, err)
			return nil
		}
		fmt.Fprintf(&lines, "  log %d at %s: %s token %d %s %s\n", m.Seq, m.Time.Format("15:04:05.000"), e.Kind, e.Token, e.Owner, e.Turn)
		switch e.Kind {
		case sessionlog.KindFence:
			v.Fences++
			if lastKind == sessionlog.KindFence && e.Owner != lastOwner {
				v.Takeovers++ // a run fenced and committed nothing before another took over
			}
			lastOwner = e.Owner
			// A holder may fence again under its token (a turn resumed
			// in the same lease); an older token never.
			if e.Token < token {
				v.violate("%s: fence %d has token %d after token %d", s.ID, m.Seq, e.Token, token)
			}
			token = e.Token
		case sessionlog.KindCommit, sessionlog.KindConsume:
			if e.Token != token {
				v.violate("%s: %s %d written under token %d while token %d held the log", s.ID, e.Kind, m.Seq, e.Token, token)
			}
			if e.Kind == sessionlog.KindCommit {
				if turnIDs[e.Turn] {
					v.violate("%s: turn %s committed twice", s.ID, e.Turn)
				}
				turnIDs[e.Turn] = true
			}
		}
		return nil
	})
	if err != nil {
		v.violate("%s: reading its log: %v", s.ID, err)
	}
	v.logs[s.ID] = lines.String()
	turns, err := insp.Turns(ctx, s.ID)
	if err != nil {
		v.violate("%s: %v", s.ID, err)
		return
	}
	var cursor uint64
	for _, t := range turns {
		v.Turns++
		v.Commits = append(v.Commits, t.Committed)
		if t.Status == lash.TurnSetAside {
			v.violate("%s: commit %d set aside: %s", s.ID, t.Seq, t.SetAside)
		}
		if t.Failed {
			v.violate("%s: turn %s failed: %s", s.ID, t.Turn, t.Termination)
		}
		if t.Cursor < cursor {
			v.violate("%s: turn %s moved the input cursor back from %d to %d", s.ID, t.Turn, cursor, t.Cursor)
		}
		cursor = max(cursor, t.Cursor)
	}
	for _, in := range s.Inputs {
		sp := Span{Acked: in.At}
		for _, t := range turns {
			if t.Cursor >= in.Seq {
				sp.Consumed = t.Committed
				break
			}
		}
		v.Spans = append(v.Spans, sp)
		if in.Seq > cursor {
			v.violate("%s: acknowledged input %d (%s) was never consumed (cursor %d)", s.ID, in.Seq, in.Key, cursor)
		}
	}
	if s.Err != "" {
		return
	}
	// Each acknowledged message is in the transcript exactly once, and
	// each turn answered once.
	page, err := h.API.Transcript(ctx, nodeapi.TranscriptRequest{Session: s.ID, Limit: 1000})
	if err != nil {
		v.violate("%s: transcript: %v", s.ID, err)
		return
	}
	seen := map[string]int{}
	notices := map[string]int{}
	answers := 0
	for _, m := range page.Messages {
		switch m.Role {
		case "user":
			seen[m.Text]++
		case "assistant":
			if m.Text != "" {
				answers++
			}
		case "system":
			// A process's end told as a notice as well as through its
			// await (ADR 0022: it ended between the await answering
			// pending and the commit that parked the call).
			if rest, ok := strings.CutPrefix(m.Text, "[process "); ok {
				id, _, _ := strings.Cut(rest, " ")
				notices[id]++
			}
		}
	}
	for id, n := range notices {
		v.ToldTwice++
		if n > 1 {
			v.violate("%s: the end of process %s was told %d times as a notice", s.ID, id, n)
		}
	}
	for _, in := range s.Inputs {
		if in.Text != "" && seen[in.Text] != 1 {
			v.violate("%s: input %q is in the transcript %d times", s.ID, in.Text, seen[in.Text])
		}
	}
	// A notice may start a turn of its own (one more answer) or join the
	// running one at its checkpoint.
	if answers < 2 || answers > 2+len(notices) {
		var lines []string
		for _, m := range page.Messages {
			lines = append(lines, fmt.Sprintf("%s %s: %s", m.Turn, m.Role, clip(m.Text, 60)))
		}
		v.violate("%s: %d answers in the transcript, want 2 and one per notice at most:\n  %s", s.ID, answers, strings.Join(lines, "\n  "))
	}
}

// recordTimes maps the stream sequence of each record of a turn to when
// the server stored it, and checks the journal's rule on the way: one
// record per subject, the first.
func recordTimes(ctx context.Context, c *streams.Client, session, turnID string) (map[uint64]time.Time, error) {
	filter, err := c.Subjects().TurnEffects(session, turnID)
	if err != nil {
		return nil, err
	}
	out := map[uint64]time.Time{}
	var twice []string
	records := map[string]bool{}
	err = c.Read(ctx, filter, 0, func(m *streams.Msg) error {
		out[m.Seq] = m.Time
		if strings.HasSuffix(m.Subject, ".r") {
			if records[m.Subject] {
				twice = append(twice, m.Subject)
			}
			records[m.Subject] = true
		}
		return nil
	})
	if err == nil && len(twice) > 0 {
		err = fmt.Errorf("more than one record on %s", strings.Join(twice, ", "))
	}
	return out, err
}

// checkProcesses reads every process: each ended once, and returns the
// time each ended by the writer's clock, by id.
func checkProcesses(ctx context.Context, v *Verdict, h History) map[string]time.Time {
	reg := processes.New(h.Client, "chaos-checker")
	ps, unreadable, err := reg.List(ctx)
	if err != nil {
		v.violate("processes: %v", err)
		return nil
	}
	for id, err := range unreadable {
		v.violate("process %s unreadable: %v", id, err)
	}
	ends := map[string]time.Time{}
	for _, p := range ps {
		v.Processes++
		if _, rest, ok := strings.Cut(string(p.Registration.Input.Args), `"subject":"`); ok {
			subject, _, _ := strings.Cut(rest, `"`)
			what := fmt.Sprintf("%s %s", p.ID, p.Status())
			if p.End != nil {
				what += " " + clip(string(p.End.Data), 160)
			}
			v.triggerProcs[subject] = append(v.triggerProcs[subject], what)
		}
		if p.End == nil {
			v.violate("process %s never ended (status %s)", p.ID, p.Status())
			continue
		}
		ends[p.ID] = p.End.At
		if st := p.Status(); st != processes.Completed {
			v.violate("process %s (%s %s) ended %s: %s", p.ID, p.Registration.Input.Kind, p.Registration.Input.Tool, st, clip(string(p.End.Data), 200))
		}
		evs, err := reg.Events(ctx, p.ID, 0)
		if err != nil {
			v.violate("process %s: events: %v", p.ID, err)
			continue
		}
		terminal := 0
		for _, e := range evs {
			if processes.Terminal(e.Type) {
				terminal++
			}
		}
		if terminal != 1 {
			v.violate("process %s has %d terminal events", p.ID, terminal)
		}
	}
	return ends
}

// checkTools: no execution of a call began after its outcome was recorded
// (later than Grace, for requests sent before and delivered late).
func checkTools(ctx context.Context, v *Verdict, h History, j *journals, procEnds map[string]time.Time) {
	byKey := map[string][]Execution{}
	for _, e := range h.Tools {
		v.ToolExecutions++
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	for key, runs := range byKey {
		if session, _, _ := strings.Cut(key, "/"); session != "" {
			j.load(ctx, session) // a sub-agent's session
		}
		at, ok := j.recorded[key]
		if !ok {
			if pid, isProc := processOfKey(key); isProc {
				at, ok = procEnds[pid]
			}
		}
		if !ok {
			v.violate("tool call %s ran %d times and has no recorded outcome", key, len(runs))
			continue
		}
		v.InDoubtReruns += len(runs) - 1
		for _, r := range runs {
			switch late := r.Start.Sub(at); {
			case late > h.Grace:
				v.violate("tool call %s ran again %s after its outcome was recorded (attempt %d, in doubt %t)", key, late.Round(time.Millisecond), r.Attempt, r.InDoubt)
			case late > 0:
				v.StaleDeliveries++
			}
		}
	}
}

// processOfKey reads the process id out of a process's idempotency key
// ("[<session>]/proc:<id>/...").
func processOfKey(key string) (string, bool) {
	_, rest, ok := strings.Cut(key, "/proc:")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, "/")
	return id, true
}

// checkModels: no model request of a session began after the record of
// its call. A session's model calls are told apart by the length of the
// conversation they send, which grows with every call; the n-th distinct
// length is the n-th recorded call.
func checkModels(v *Verdict, h History, llm map[string][]llmRecord) {
	type call struct {
		length int
		reqs   []testenv.RequestRecord
	}
	per := map[string]map[int][]testenv.RequestRecord{}
	for _, r := range h.Models {
		v.ModelRequests++
		var texts []string
		for _, m := range r.Request.Messages {
			if m.Role == turn.RoleUser {
				texts = append(texts, m.Text)
			}
		}
		s := sessionOfRequest(texts)
		if s == "" {
			continue
		}
		if per[s] == nil {
			per[s] = map[int][]testenv.RequestRecord{}
		}
		n := len(r.Request.Messages)
		per[s][n] = append(per[s][n], r)
	}
	for s, byLen := range per {
		var calls []call
		for n, reqs := range byLen {
			calls = append(calls, call{n, reqs})
		}
		sort.Slice(calls, func(i, j int) bool { return calls[i].length < calls[j].length })
		recs := llm[s]
		if len(calls) != len(recs) {
			v.violate("%s: %d model calls made, %d recorded", s, len(calls), len(recs))
			continue
		}
		for i, c := range calls {
			for _, r := range c.reqs {
				late := r.Time.Sub(recs[i].at)
				if late > 0 && justResumed(h.Resumes, r.Time) {
					v.StaleDeliveries++
					continue
				}
				if late > 0 {
					var all []string
					for _, q := range c.reqs {
						all = append(all, q.Time.Format("15:04:05.000")+" "+q.Summary)
					}
					v.violate("%s: model call %d (%s, recorded at %s by %s) requested again %s after its outcome was recorded; requests:\n  %s\n%s",
						s, i+1, recs[i].key, recs[i].at.Format("15:04:05.000"), recs[i].recorder, late.Round(time.Millisecond), strings.Join(all, "\n  "), v.logs[s])
				}
			}
		}
	}
}

// checkTriggers: each acknowledged signal started the subscription's tool
// under one process (one idempotency key), which ran.
func checkTriggers(v *Verdict, h History) {
	keys := map[string]map[string]bool{}
	for _, e := range h.Tools {
		if e.Tag != "trigger" {
			continue
		}
		var subject string
		if _, rest, ok := strings.Cut(e.Event, `"subject":"`); ok {
			subject, _, _ = strings.Cut(rest, `"`)
		}
		if keys[subject] == nil {
			keys[subject] = map[string]bool{}
		}
		keys[subject][e.Key] = true
	}
	for _, s := range h.Workload.Triggered() {
		v.TriggerSignals++
		subject := "lash.signal." + s.Subject + "." + strings.TrimPrefix(s.Key, "trig-")
		if n := len(keys[subject]); n != 1 {
			v.violate("signal %s started %d processes, want 1 (processes: %v)", subject, n, v.triggerProcs[subject])
		}
	}
}

func justResumed(resumes []time.Time, t time.Time) bool {
	for _, r := range resumes {
		if !t.Before(r) && t.Sub(r) < resumeGrace {
			return true
		}
	}
	return false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func sessionlogKind(data []byte) sessionlog.Kind {
	if e, err := sessionlog.DecodeEntry(data); err == nil {
		return e.Kind
	}
	return 0
}
