package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
)

var watchCmd = &command{
	name:    "watch",
	args:    "ID",
	summary: "follow a session's live events",
	doc: `Follows the session's live events (<prefix>.live.<ID>) as its turns run: answers as
they stream, messages, tool calls starting and ending, waits, commits. It starts with the
events the deployment's LIVE stream still keeps (an hour by default), or after --from SEQ,
and goes on until interrupted; after a lost connection it goes on from the last event it
printed, so nothing is missed or printed twice. When the events after a sequence are no
longer all kept, it says so on stderr and goes on with what is. With --json each event is
a line {"seq":N,"event":{...}}; the event's schema is in the README.`,
	min: 1, max: 1,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.Uint64Var(&a.from, "from", 0, "the last `sequence` seen: print only the events after it")
	},
	run: runWatch,
}

// followRetries bounds the reconnections of one follow in a row that
// deliver nothing: past it the command fails.
const followRetries = 10

// follow calls fn with the session's live events after *from, moving *from
// on, and picks up again after a connection failure or a stream too far
// ahead, until ctx ends, fn fails, or followRetries attempts in a row
// deliver nothing.
func (a *app) follow(ctx context.Context, session string, from *uint64, fn func(live.Record) error) error {
	failures := 0
	for {
		delivered := false
		err := live.Follow(ctx, a.client, session, *from, func(r live.Record) error {
			delivered, failures = true, 0
			*from = r.Seq
			return fn(r)
		})
		var behind *live.BehindError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &behind):
			fmt.Fprintf(a.stderr, "lash-admin: %v; going on from %d\n", behind, behind.First)
			*from = behind.First - 1
			if behind.After > behind.Last {
				*from = 0
			}
			continue
		case err == nil:
			return nil
		}
		if !delivered {
			failures++
		}
		if failures >= followRetries {
			return fmt.Errorf("following %s: %w", session, err)
		}
		fmt.Fprintf(a.stderr, "lash-admin: following %s: %v; again from %d\n", session, err, *from)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(failures) * 500 * time.Millisecond):
		}
	}
}

func runWatch(a *app, args []string) error {
	id := args[0]
	if _, err := streams.Token(id); err != nil {
		return a.usagef("session id: %v", err)
	}
	from := a.from
	p := &eventPrinter{w: a.stdout}
	return a.follow(a.ctx, id, &from, func(r live.Record) error {
		if a.json {
			b, err := json.Marshal(struct {
				Seq   uint64     `json:"seq"`
				Event live.Event `json:"event"`
			}{r.Seq, r.Event})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "%s\n", b)
			return err
		}
		return p.print(r)
	})
}

// eventPrinter writes live events for people: a streamed answer as it
// comes, everything else a line each.
type eventPrinter struct {
	w            io.Writer
	messagesOnly bool   // transcript --follow: the conversation, no steps
	streaming    bool   // a delta left the line open
	streamed     string // the text the deltas since the last message made
}

func (p *eventPrinter) line(format string, args ...any) error {
	if p.streaming {
		fmt.Fprintln(p.w)
		p.streaming = false
	}
	_, err := fmt.Fprintf(p.w, format+"\n", args...)
	return err
}

func (p *eventPrinter) print(r live.Record) error {
	ev := r.Event
	head := fmt.Sprintf("%d %s", r.Seq, ev.Turn)
	switch ev.Type {
	case live.TypeTextDelta:
		if !p.streaming {
			fmt.Fprintf(p.w, "%s assistant: ", head)
			p.streaming = true
		}
		p.streamed += ev.Text
		_, err := io.WriteString(p.w, strings.ReplaceAll(ev.Text, "\n", "\n  "))
		return err
	case live.TypeMessage:
		if ev.Message == nil {
			return nil
		}
		m := *ev.Message
		streamed := p.streamed
		p.streamed = ""
		if m.Role == "assistant" && m.Text != "" && m.Text == streamed {
			if len(m.ToolCalls) == 0 {
				return nil // its text streamed already
			}
			m.Text = ""
		}
		return p.line("%s %s: %s", head, m.Role, cell(messageLine(&m)))
	case live.TypeTurnCommitted:
		if p.messagesOnly {
			return nil
		}
		return p.line("%s committed: %s %s %s", head, ev.Status, ev.Termination, ev.Code)
	}
	if p.messagesOnly {
		return nil
	}
	switch ev.Type {
	case live.TypeTurnFailed:
		return p.line("%d run stopped: %s", r.Seq, ev.Error)
	case live.TypeNotice:
		return p.line("%s notice %s %s %s", head, ev.Name, ev.CallID, cell(ev.Detail))
	case "tool_started", "tool_finished", "tool_suspended", "tool_blocked", "tool_cancelled", "run_waiting", "run_resumed", "llm_retry":
		return p.line("%s %s %s %s", head, ev.Type, ev.CallID, cell(ev.Detail))
	}
	return nil
}

// messageLine is a live message in a line.
func messageLine(m *live.Message) string {
	var parts []string
	if m.Text != "" {
		parts = append(parts, m.Text)
	}
	for _, c := range m.ToolCalls {
		parts = append(parts, fmt.Sprintf("call %s %s [%s]", c.Name, c.Arguments, c.ID))
	}
	if m.Role == "tool" {
		parts = append([]string{m.CallID + " " + m.Name}, parts...)
	}
	return strings.Join(parts, " ")
}

// sendWait waits until the input at seq is consumed and prints the answer
// of the turn that consumed it: the last assistant text of that turn.
func (a *app) sendWait(id string, seq uint64, start uint64) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.waitTimeout)
	defer cancel()
	// Check whenever a turn of the session ends, and now and then anyway:
	// an input consumed without a turn publishes no commit.
	ends := make(chan struct{}, 1)
	go func() {
		from := start
		_ = a.follow(ctx, id, &from, func(r live.Record) error {
			if r.Event.Type == live.TypeTurnCommitted {
				select {
				case ends <- struct{}{}:
				default:
				}
			}
			return nil
		})
	}()
	for {
		done, err := a.answer(id, seq)
		if done || err != nil {
			return err
		}
		select {
		case <-ends:
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			if a.ctx.Err() != nil {
				return a.ctx.Err()
			}
			return fmt.Errorf("input %d of session %s was not consumed within %s (--wait-timeout)", seq, id, a.waitTimeout)
		}
	}
}

type answerJSON struct {
	Session     string `json:"session"`
	Seq         uint64 `json:"seq"`
	Turn        string `json:"turn"`
	Status      string `json:"status"`
	Termination string `json:"termination"`
	Suspended   int    `json:"suspended"`
	Answer      string `json:"answer"`
}

// answer prints the answer to the input at seq once it is consumed.
func (a *app) answer(id string, seq uint64) (bool, error) {
	p, h, err := a.head(id)
	if err != nil || h.InputCursor < seq {
		return false, ignoreUnknown(err)
	}
	ts, err := lash.NewInspector(a.client).Turns(a.ctx, id)
	if err != nil {
		return false, err
	}
	var t *lash.TurnSummary
	for i := range ts {
		if ts[i].Input <= seq && seq <= ts[i].Cursor {
			t = &ts[i]
		}
	}
	if t == nil {
		return true, fmt.Errorf("input %d of session %s was consumed without a turn (see lash-admin quarantine ls)", seq, id)
	}
	entries, err := p.Transcript(id, 0)
	if err != nil {
		return false, err
	}
	out := answerJSON{Session: id, Seq: seq, Turn: t.Turn, Status: t.Status, Termination: t.Termination.Reason.String(), Suspended: t.Suspended}
	for _, e := range entries {
		if e.Turn == t.Turn && e.Message.Role == turn.RoleAssistant && e.Message.Text != "" {
			out.Answer = e.Message.Text
		}
	}
	return true, a.emit(out, func(w io.Writer) {
		if out.Answer != "" {
			fmt.Fprintln(w, out.Answer)
		}
		fmt.Fprintf(a.stderr, "session %s: turn %s %s (%s)", id, t.Turn, t.Status, t.Termination)
		if t.Suspended > 0 {
			fmt.Fprintf(a.stderr, ", %d call(s) suspended", t.Suspended)
		}
		fmt.Fprintln(a.stderr)
	})
}

// ignoreUnknown: a session not yet folded is one whose input is not
// consumed yet.
func ignoreUnknown(err error) error {
	if errors.Is(err, errUnknownSession) {
		return nil
	}
	return err
}
