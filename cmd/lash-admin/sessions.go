package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/lash-run/lash/projector"
)

var sessionsLsCmd = &command{
	name:    "sessions ls",
	summary: "list sessions: revision, turns, status, tokens, pending inputs",
	doc: `Lists the sessions of the deployment from lash-admin's projection cache, caught up
with the streams first: head revision, turns committed, the last turn's status and
termination, tokens used (input+output), inputs not yet consumed and calls suspended.
Sessions come in pages of --limit, in the order of their ids' tokens; when more follow,
the table ends with the --after to pass for the next page (JSON: "next").`,
	max: 0,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.IntVar(&a.limit, "limit", 1000, "at most `n` sessions")
		fs.StringVar(&a.after, "after", "", "start after the session `id` (the next page's, as the last one said)")
	},
	check: func(a *app, _ []string) error {
		if a.limit < 1 {
			return fmt.Errorf("--limit %d: must be at least 1", a.limit)
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
	Session       string          `json:"session"`
	Revision      uint64          `json:"revision"`
	Fence         uint64          `json:"fence"`
	Turns         int             `json:"turns"`
	LastTurn      string          `json:"last_turn"`
	Status        string          `json:"status"`
	Termination   terminationJSON `json:"termination"`
	Usage         usageJSON       `json:"usage"`
	Messages      int             `json:"messages"`
	Inputs        int             `json:"inputs"`
	LastInput     uint64          `json:"last_input"`
	InputCursor   uint64          `json:"input_cursor"`
	PendingInputs int             `json:"pending_inputs"`
	Suspended     int             `json:"suspended"`
}

func sessionOf(h *projector.SessionHead) sessionJSON {
	return sessionJSON{Session: h.Session, Revision: h.Revision, Fence: h.Fence, Turns: h.Turns, LastTurn: h.LastTurn,
		Status: status(h.Status), Termination: terminationOf(h.Termination), Usage: usageOf(h.Usage),
		Messages: h.Messages, Inputs: h.Inputs, LastInput: h.LastInput, InputCursor: h.InputCursor,
		PendingInputs: h.PendingInputs, Suspended: h.Suspended}
}

type sessionsJSON struct {
	Sessions []sessionJSON `json:"sessions"`
	// Next is the --after of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

func runSessionsLs(a *app, _ []string) error {
	p, err := a.projection()
	if err != nil {
		return err
	}
	heads, next, err := p.SessionsPage(a.after, a.limit)
	if err != nil {
		return err
	}
	out := sessionsJSON{Sessions: []sessionJSON{}, Next: next}
	for i := range heads {
		out.Sessions = append(out.Sessions, sessionOf(&heads[i]))
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "SESSION", "REV", "TURNS", "LAST TURN", "STATUS", "TERMINATION", "TOKENS", "PENDING", "SUSPENDED")
		for _, h := range heads {
			row(w, h.Session, h.Revision, h.Turns, h.LastTurn, status(h.Status), fmtTermination(h.Termination),
				fmtUsage(h.Usage), h.PendingInputs, h.Suspended)
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
	return a.emit(out, func(w io.Writer) {
		row(w, "session", h.Session)
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
