package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

var sessionsLsCmd = &command{
	name:    "sessions ls",
	summary: "list sessions: state, last activity, turns, tokens, pending inputs",
	doc: `Lists the sessions of the deployment from lash-admin's projection cache, caught up
with the streams first: their state (running: inputs wait or a turn runs; waiting: calls
suspended or parked; failed: the last turn was committed as failed; idle), when they were
last active and created (by the server's clock), head revision, turns committed, the last
turn's termination, tokens used (input+output), inputs not yet consumed, calls
suspended, the agent the session runs (empty: the default agent) and its labels; --label
KEY=VALUE (repeated: all of them) keeps the sessions with those labels. The most recently active come first (--sort id: in the order of their ids'
tokens); --state keeps one state. Sessions come in pages of --limit; when more follow, the
table ends with the --after to pass for the next page (JSON: "next"). Ordered by activity,
a page is read afresh each time: sessions active since move to the front.`,
	max: 0,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.IntVar(&a.limit, "limit", 1000, "at most `n` sessions")
		fs.StringVar(&a.after, "after", "", "start after the session `id` (the next page's, as the last one said)")
		fs.StringVar(&a.sortBy, "sort", "activity", "`order`: activity (latest first) or id")
		fs.StringVar(&a.stateFilter, "state", "", "only sessions in this `state`: idle, running, waiting or failed")
		fs.Var(&a.labels, "label", "only sessions with the label `KEY=VALUE` (repeat for several)")
	},
	check: func(a *app, _ []string) error {
		switch {
		case a.limit < 1:
			return a.usagef("--limit %d: must be at least 1", a.limit)
		case a.sortBy != "activity" && a.sortBy != "id":
			return a.usagef("--sort %q: give activity or id", a.sortBy)
		case a.stateFilter != "" && !slices.Contains([]string{"idle", "running", "waiting", "failed"}, a.stateFilter):
			return a.usagef("--state %q: give idle, running, waiting or failed", a.stateFilter)
		}
		return nil
	},
	run: runSessionsLs,
}

var sessionsShowCmd = &command{
	name:    "sessions show",
	args:    "ID",
	summary: "a session's head and the calls it holds suspended",
	doc: `Shows a session's head: revision, fence token, turns and the last one, status and
termination, usage, messages, inputs (appended, consumed, pending) and the calls its
last commit left suspended, with their call id, tool and ticket; "lash-admin decide"
answers them.`,
	min: 1, max: 1,
	run: runSessionsShow,
}

// sessionJSON is a session's head.
type sessionJSON struct {
	Session       string            `json:"session"`
	State         string            `json:"state"`
	Created       time.Time         `json:"created"`
	Active        time.Time         `json:"active"`
	Revision      uint64            `json:"revision"`
	Fence         uint64            `json:"fence"`
	Turns         int               `json:"turns"`
	LastTurn      string            `json:"last_turn"`
	Status        string            `json:"status"`
	Termination   terminationJSON   `json:"termination"`
	Usage         usageJSON         `json:"usage"`
	Messages      int               `json:"messages"`
	Inputs        int               `json:"inputs"`
	LastInput     uint64            `json:"last_input"`
	InputCursor   uint64            `json:"input_cursor"`
	PendingInputs int               `json:"pending_inputs"`
	Suspended     int               `json:"suspended"`
	Agent         string            `json:"agent,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// labelFlag collects KEY=VALUE labels.
type labelFlag map[string]string

func (f *labelFlag) String() string { return fmt.Sprint(map[string]string(*f)) }

func (f *labelFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: give KEY=VALUE", s)
	}
	if *f == nil {
		*f = labelFlag{}
	}
	(*f)[k] = v
	return nil
}

// has reports whether h carries every label of f.
func (f labelFlag) has(h *projector.SessionHead) bool {
	for k, v := range f {
		if got, ok := h.Label(k); !ok || got != v {
			return false
		}
	}
	return true
}

func fmtLabels(ls []sessionlog.Label) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.Key + "=" + l.Value
	}
	return strings.Join(parts, ",")
}

func sessionOf(h *projector.SessionHead) sessionJSON {
	return sessionJSON{Session: h.Session, State: stateOf(h), Created: h.Created, Active: h.Active, Revision: h.Revision, Fence: h.Fence, Turns: h.Turns, LastTurn: h.LastTurn,
		Status: status(h.Status), Termination: terminationOf(h.Termination), Usage: usageOf(h.Usage),
		Messages: h.Messages, Inputs: h.Inputs, LastInput: h.LastInput, InputCursor: h.InputCursor,
		PendingInputs: h.PendingInputs, Suspended: h.Suspended, Agent: h.Agent, Labels: h.LabelMap()}
}

type sessionsJSON struct {
	Sessions []sessionJSON `json:"sessions"`
	// Next is the --after of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// stateOf is what a session is doing, in a word.
func stateOf(h *projector.SessionHead) string {
	switch {
	case h.PendingInputs > 0:
		return "running"
	case h.Termination.Reason == turn.Error:
		return "failed"
	case h.Status == turn.StatusWaiting || h.Suspended > 0:
		return "waiting"
	}
	return "idle"
}

func runSessionsLs(a *app, _ []string) error {
	p, err := a.projection()
	if err != nil {
		return err
	}
	var heads []projector.SessionHead
	var next string
	if a.sortBy == "id" && a.stateFilter == "" && len(a.labels) == 0 {
		heads, next, err = p.SessionsPage(a.after, a.limit)
	} else {
		keep := func(h *projector.SessionHead) bool {
			return (a.stateFilter == "" || stateOf(h) == a.stateFilter) && a.labels.has(h)
		}
		heads, next, err = sortedPage(p, a.sortBy, keep, a.after, a.limit)
	}
	if err != nil {
		return err
	}
	out := sessionsJSON{Sessions: []sessionJSON{}, Next: next}
	for i := range heads {
		out.Sessions = append(out.Sessions, sessionOf(&heads[i]))
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "SESSION", "STATE", "ACTIVE", "CREATED", "REV", "TURNS", "LAST TURN", "TERMINATION", "TOKENS", "PENDING", "SUSPENDED", "AGENT", "LABELS")
		for i := range heads {
			h := &heads[i]
			row(w, h.Session, stateOf(h), fmtTime(h.Active), fmtTime(h.Created), h.Revision, h.Turns, h.LastTurn,
				fmtTermination(h.Termination), fmtUsage(h.Usage), h.PendingInputs, h.Suspended, h.Agent, fmtLabels(h.Labels))
		}
		if next != "" {
			fmt.Fprintf(w, "more: --after %q\n", next)
		}
	})
}

// suspendedJSON is a call waiting on a decision.
type suspendedJSON struct {
	CallID    string     `json:"call_id"`
	Tool      string     `json:"tool"`
	Arguments string     `json:"arguments"`
	Ticket    ticketJSON `json:"ticket"`
	Iteration int        `json:"iteration"`
}

type ticketJSON struct {
	Reason string `json:"reason"`
	Data   string `json:"data"`
}

type sessionShowJSON struct {
	sessionJSON
	// Pending lists the sequences of the inputs not yet consumed.
	Pending        []uint64        `json:"pending"`
	SuspendedCalls []suspendedJSON `json:"suspended_calls"`
	// Parent and Process name, for a sub-agent's session, the session
	// whose turn started it and its process.
	Parent  string `json:"parent,omitempty"`
	Process string `json:"process,omitempty"`
}

// unknownSession is the error for a session the deployment has never seen.
func unknownSession(id string) error { return fmt.Errorf("%w %s", errUnknownSession, id) }

var errUnknownSession = errors.New("unknown session")

// head reads a session's head from the projection, caught up through it.
func (a *app) head(id string) (*projector.Projector, *projector.SessionHead, error) {
	p, err := a.projection(id)
	if err != nil {
		return nil, nil, err
	}
	h, err := p.Session(id)
	if errors.Is(err, projector.ErrNotFound) {
		return nil, nil, unknownSession(id)
	}
	return p, h, err
}

func runSessionsShow(a *app, args []string) error {
	p, h, err := a.head(args[0])
	if err != nil {
		return err
	}
	calls, err := p.Suspended(h)
	if err != nil {
		return err
	}
	out := sessionShowJSON{sessionJSON: sessionOf(h), Pending: append([]uint64{}, h.Pending...), SuspendedCalls: []suspendedJSON{}}
	for _, c := range calls {
		out.SuspendedCalls = append(out.SuspendedCalls, suspendedJSON{CallID: c.Call.ID, Tool: c.Call.Name,
			Arguments: c.Call.Arguments, Ticket: ticketJSON{Reason: c.Ticket.Reason, Data: c.Ticket.Data}, Iteration: c.Iteration})
	}
	if sub, err := builtin.AgentOf(a.ctx, processes.New(a.client, "lash-admin"), h.Session); err != nil {
		return err
	} else if sub != nil {
		out.Process, out.Parent = sub.ID, sub.Registration.Provenance.Session
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "session", h.Session)
		if out.Process != "" {
			row(w, "sub-agent of", fmt.Sprintf("session %s (process %s)", out.Parent, out.Process))
		}
		if h.Agent != "" {
			row(w, "agent", h.Agent)
		}
		if len(h.Labels) > 0 {
			row(w, "labels", fmtLabels(h.Labels))
		}
		row(w, "revision", h.Revision)
		row(w, "fence", h.Fence)
		last := ""
		if h.LastTurn != "" {
			last = fmt.Sprintf(" (last %s)", h.LastTurn)
		}
		row(w, "turns", fmt.Sprintf("%d%s", h.Turns, last))
		st := status(h.Status)
		if h.Termination.Reason != 0 {
			st += ": " + h.Termination.String()
		}
		row(w, "status", st)
		row(w, "usage", fmt.Sprintf("%d input + %d output = %d tokens", h.Usage.InputTokens, h.Usage.OutputTokens, h.Usage.Total()))
		row(w, "messages", h.Messages)
		row(w, "inputs", fmt.Sprintf("%d appended, consumed through %d", h.Inputs, h.InputCursor))
		pending := fmt.Sprint(h.PendingInputs)
		if len(h.Pending) > 0 {
			pending += fmt.Sprintf(" %v", h.Pending)
		}
		row(w, "pending", pending)
		row(w, "suspended", len(calls))
		if len(calls) > 0 {
			fmt.Fprintln(w)
			row(w, "CALL", "TOOL", "TICKET", "ARGUMENTS")
			for _, c := range out.SuspendedCalls {
				ticket := c.Ticket.Reason
				if c.Ticket.Data != "" {
					ticket += " [" + c.Ticket.Data + "]"
				}
				row(w, c.CallID, c.Tool, clip(ticket, 60), clip(c.Arguments, 60))
			}
		}
	})
}

// sortedPage reads every head, keeps those in state (all when empty),
// orders them by sortBy and returns the page after the session after.
func sortedPage(p *projector.Projector, sortBy string, keep func(*projector.SessionHead) bool, after string, limit int) ([]projector.SessionHead, string, error) {
	var all []projector.SessionHead
	for from := ""; ; {
		page, next, err := p.SessionsPage(from, 4096)
		if err != nil {
			return nil, "", err
		}
		for i := range page {
			if keep(&page[i]) {
				all = append(all, page[i])
			}
		}
		if next == "" {
			break
		}
		from = next
	}
	if sortBy == "activity" {
		slices.SortStableFunc(all, func(x, y projector.SessionHead) int {
			return cmp.Or(y.Active.Compare(x.Active), cmp.Compare(x.Session, y.Session))
		})
	}
	if after != "" {
		i := slices.IndexFunc(all, func(h projector.SessionHead) bool { return h.Session == after })
		all = all[i+1:] // not found (-1): from the start
	}
	if len(all) > limit {
		return all[:limit], all[limit-1].Session, nil
	}
	return all, "", nil
}
