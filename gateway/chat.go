package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/streams"
)

// The chat protocols' endpoints: a request appends its input (a message
// or decisions) and streams the response to it, through the commit that
// answers it. A client that goes away cancels nothing: the turn runs to
// its commit, and a replay finds it.

// errAnswered ends a relay at the commit that answers its inputs.
var errAnswered = errors.New("answered")

// maxResponseBytes bounds the events a relay keeps before it sends them
// (a replay's backlog, an earlier turn's events held for its commit).
const maxResponseBytes = tapBytes * 8

var errResponseTooLarge = fmt.Errorf("the response is over %d bytes of events: read the transcript", maxResponseBytes)

// response is where a request's response starts: the tap, opened before
// its inputs were appended, and the inputs' last sequence.
type response struct {
	t       *tap
	pos     uint64
	through uint64
	// replay: read the response from the stream's start (a duplicate
	// request, or a resume), not only what comes after pos.
	replay bool
}

// relay hands each event of the response to event, and its answering
// commit to end.
func (g *Gateway) relay(ctx context.Context, rs *response, idle *beat, event func(live.Record) error, end func(live.Event) error) error {
	var last atomic.Int64 // when the last event came, in unix nanoseconds
	last.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go g.watchAnswer(ctx, rs, &last)
	// Turns named for a later input are other responses' (a replay reads
	// past its own); the events of a turn named for an earlier input are
	// the end of an earlier response, unless that turn takes the input at
	// a checkpoint: they are held until its commit says which.
	var held []live.Record
	heldBytes := 0
	handle := func(rec live.Record) error {
		last.Store(time.Now().UnixNano())
		ev := rec.Event
		id, named := lash.TurnInput(ev.Turn)
		switch {
		case answers(ev, rs.through):
			for _, h := range held {
				if err := event(h); err != nil {
					return err
				}
			}
			held = nil
			if err := end(ev); err != nil {
				return err
			}
			if idle != nil {
				// The end goes out now, not after the request's teardown.
				if err := idle.flush(); err != nil {
					return err
				}
			}
			return errAnswered
		case named && id > rs.through:
			return nil
		case named && id < rs.through:
			if ev.Type == live.TypeTurnCommitted || ev.Type == live.TypeInputConsumed {
				held, heldBytes = held[:0], 0 // it answered an earlier input only
				return nil
			}
			// Rare (a turn that took the input at a checkpoint): its size
			// as the wire carries it.
			b, _ := ev.AppendJSON(nil)
			if heldBytes += len(b); heldBytes > maxResponseBytes {
				return errResponseTooLarge
			}
			held = append(held, rec)
			return nil
		}
		return event(rec)
	}
	after := rs.pos
	if rs.replay {
		// Read what the stream keeps of the session, and keep the events
		// after the last commit that ended an earlier response.
		var backlog []live.Record
		size := 0
		first, _, err := g.c.Bounds(ctx, streams.Live)
		if err != nil {
			return err
		}
		subj, err := g.c.Subjects().Live(rs.t.session)
		if err != nil {
			return err
		}
		after = max(first, 1) - 1
		err = g.c.Read(ctx, subj, max(first, 1), func(m *streams.Msg) error {
			after = m.Seq
			ev := decodeEvent(rs.t.session, m)
			ended := ev.Type == live.TypeTurnCommitted && ev.Status != "waiting" || ev.Type == live.TypeInputConsumed
			if ended && ev.Cursor < rs.through {
				backlog, size = backlog[:0], 0
				return nil
			}
			if size += len(m.Data); size > maxResponseBytes {
				return errResponseTooLarge
			}
			backlog = append(backlog, live.Record{Seq: m.Seq, Event: ev})
			return nil
		})
		if err != nil {
			return err
		}
		for _, rec := range backlog {
			if err := handle(rec); err != nil {
				return err
			}
		}
	}
	return g.hub.from(ctx, rs.t, rs.pos, after, handle, idle)
}

// answerCheck is how long a response stream waits with no event before
// it asks the session's head whether the response is over: live events
// are not truth, and one lost (a publish that failed, a LIVE stream made
// anew) must not hold a stream open for ever.
var answerCheck = 5 * time.Second

const maxAnswerCheck = time.Minute

// watchAnswer ends a quiet response from the session's head: once its
// inputs are consumed, the commit that did it ends the response (pushed
// as the last event, after those queued).
func (g *Gateway) watchAnswer(ctx context.Context, rs *response, last *atomic.Int64) {
	// Quiet for long (a long tool call, a turn queued behind another) it
	// asks less and less often, at most every maxAnswerCheck.
	wait := answerCheck
	for {
		quiet := time.Since(time.Unix(0, last.Load()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait-quiet, answerCheck/5)):
		}
		if time.Since(time.Unix(0, last.Load())) < wait {
			wait = answerCheck // events came: start over
			continue
		}
		wait = min(2*wait, maxAnswerCheck)
		rctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
		st, err := g.api.Status(rctx, rs.t.session)
		cancel()
		if err != nil || st.InputCursor < rs.through {
			continue
		}
		ev := live.Event{Type: live.TypeTurnCommitted, Session: st.Session, Turn: st.LastTurn, Status: st.RunStatus,
			Termination: st.Termination, Code: st.TerminationCode, Cursor: st.InputCursor}
		rs.t.push(live.Record{Seq: math.MaxUint64, Event: ev}, 0)
		return
	}
}

// beginResponse takes a stream's place for a response and opens its tap,
// both before the request appends its input; done gives them back.
func (g *Gateway) beginResponse(r *http.Request, c *Caller, session string) (*slot, *response, func(), error) {
	sl, err := g.reserve(c)
	if err != nil {
		return nil, nil, nil, err
	}
	t, pos, err := g.hub.open(r.Context(), session)
	if err != nil {
		sl.free()
		return nil, nil, nil, err
	}
	return sl, &response{t: t, pos: pos}, func() { g.hub.close(t); sl.free() }, nil
}

// writeChunks writes chunks as SSE data frames, in one write.
func writeChunks(st *stream, chunks []chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	var b []byte
	for _, c := range chunks {
		j, err := json.Marshal(c)
		if err != nil {
			return err
		}
		b = append(b, "data: "...)
		b = append(b, j...)
		b = append(b, "\n\n"...)
	}
	return st.write(b)
}

// uiRequest is what DefaultChatTransport posts; fields it may add are
// ignored.
type uiRequest struct {
	ID        string      `json:"id"`
	Messages  []uiMessage `json:"messages"`
	Trigger   string      `json:"trigger"`
	MessageID string      `json:"messageId"`
	// Agent, from the transport's body option, names the agent a new
	// session runs.
	Agent string `json:"agent"`
}

type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

type uiPart struct {
	Type       string      `json:"type"`
	Text       string      `json:"text"`
	ToolCallID string      `json:"toolCallId"`
	State      string      `json:"state"`
	Approval   *uiApproval `json:"approval"`
}

type uiApproval struct {
	ID       string `json:"id"`
	Approved bool   `json:"approved"`
	Reason   string `json:"reason"`
}

// uiHeaders are the UI message stream's.
var uiHeaders = map[string]string{"X-Vercel-Ai-Ui-Message-Stream": "v1"}

func (g *Gateway) uiChat(w http.ResponseWriter, r *http.Request, c *Caller) error {
	var req uiRequest
	if err := readJSON(w, r, g.cfg.MaxChatBody, &req, false); err != nil {
		return err
	}
	session := req.ID
	switch {
	case !plainID(session):
		return fail(http.StatusBadRequest, "id: the chat's id is the session's: 1 to %d of [A-Za-z0-9_-]", MaxSessionID)
	case !c.Sees(session):
		return fail(http.StatusNotFound, "unknown session %q", session)
	case req.Trigger == "regenerate-message":
		return fail(http.StatusBadRequest, "lash keeps every answer it gave: send a new message instead of regenerating")
	case len(req.Messages) == 0:
		return fail(http.StatusBadRequest, "messages: none")
	}
	last := req.Messages[len(req.Messages)-1]
	sl, rs, done, err := g.beginResponse(r, c, session)
	if err != nil {
		return err
	}
	defer done()
	messageID := ""
	var known map[string]string
	switch last.Role {
	case "user":
		var text strings.Builder
		for _, p := range last.Parts {
			if p.Type == "text" {
				text.WriteString(p.Text)
			}
		}
		a, err := g.submit(r, c, session, "ui-"+last.ID, text.String(), req.Agent, nil)
		if err != nil {
			return err
		}
		rs.through, rs.replay = a.Seq, a.Duplicate
	case "assistant":
		// The answers to approvals the stream asked for.
		n := 0
		known = map[string]string{}
		for _, p := range last.Parts {
			if tool, ok := strings.CutPrefix(p.Type, "tool-"); ok && p.ToolCallID != "" {
				known[p.ToolCallID] = tool
			}
			if p.State != "approval-responded" || p.Approval == nil {
				continue
			}
			d := lash.Decision{CallID: p.ToolCallID, Action: "cancel", Payload: p.Approval.Reason}
			if p.Approval.Approved {
				d.Action, d.Payload = "resume", ""
			}
			a, err := g.decision(r, c, session, fmt.Sprintf("ui-approval-%s-%t", p.Approval.ID, p.Approval.Approved), d)
			if err != nil {
				return err
			}
			n++
			rs.through = max(rs.through, a.Seq)
			rs.replay = rs.replay || a.Duplicate
		}
		if n == 0 {
			return fail(http.StatusBadRequest, "the last message is the assistant's and answers no approval")
		}
		messageID = req.MessageID
		if messageID == "" {
			messageID = last.ID
		}
	default:
		return fail(http.StatusBadRequest, "the last message is a %q message: send the user's message", last.Role)
	}
	if rs.replay {
		// The same request again: its response may be over, or under way,
		// and is replayed whole, in the message it continues.
		messageID, known = req.MessageID, nil
	}
	return g.uiStream(w, r, sl, rs, messageID, known)
}

func (g *Gateway) uiStream(w http.ResponseWriter, r *http.Request, sl *slot, rs *response, messageID string, known map[string]string) error {
	st := g.startStream(w, r, sl, uiHeaders)
	defer st.close()
	m := newUIMapper(messageID, known)
	err := g.relay(st.ctx, rs, st.beat, func(rec live.Record) error {
		return writeChunks(st, m.event(rec.Event))
	}, func(ev live.Event) error {
		if err := writeChunks(st, m.finish(ev)); err != nil {
			return err
		}
		return st.write([]byte("data: [DONE]\n\n"))
	})
	if err != nil && !errors.Is(err, errAnswered) && st.ctx.Err() == nil {
		_ = writeChunks(st, []chunk{{"type": "error", "errorText": "the stream broke off (" + err.Error() + "): resume it"}})
	}
	return nil
}

// uiResume answers the transport's reconnect: the response under way,
// replayed from its start, or 204 when none is.
func (g *Gateway) uiResume(w http.ResponseWriter, r *http.Request, c *Caller, session string) error {
	sl, rs, done, err := g.beginResponse(r, c, session)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := g.requestCtx(r)
	status, err := g.api.Status(ctx, session)
	cancel()
	if err != nil {
		return err
	}
	if len(status.Pending) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	rs.through, rs.replay = slices.Max(status.Pending), true
	return g.uiStream(w, r, sl, rs, "", nil)
}

// aguiInput is AG-UI's RunAgentInput, as much of it as lash reads.
type aguiInput struct {
	ThreadID string `json:"threadId"`
	RunID    string `json:"runId"`
	Messages []struct {
		ID      string `json:"id"`
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Resume []struct {
		InterruptID string `json:"interruptId"`
		Status      string `json:"status"`
	} `json:"resume"`
	ForwardedProps struct {
		Agent string `json:"agent"`
	} `json:"forwardedProps"`
}

func (g *Gateway) aguiRun(w http.ResponseWriter, r *http.Request, c *Caller) error {
	var in aguiInput
	if err := readJSON(w, r, g.cfg.MaxChatBody, &in, false); err != nil {
		return err
	}
	session := in.ThreadID
	switch {
	case !plainID(session):
		return fail(http.StatusBadRequest, "threadId: the thread's id is the session's: 1 to %d of [A-Za-z0-9_-]", MaxSessionID)
	case !c.Sees(session):
		return fail(http.StatusNotFound, "unknown session %q", session)
	case in.RunID == "" || len(in.RunID) > streams.MaxIDBytes:
		return fail(http.StatusBadRequest, "runId: 1 to %d bytes", streams.MaxIDBytes)
	}
	sl, rs, done, err := g.beginResponse(r, c, session)
	if err != nil {
		return err
	}
	defer done()
	if len(in.Resume) > 0 {
		for _, res := range in.Resume {
			d := lash.Decision{CallID: askedCall(res.InterruptID), Action: "resume"}
			switch res.Status {
			case "resolved":
			case "cancelled":
				d.Action = "cancel"
			default:
				return fail(http.StatusBadRequest, "resume status %q: resolved or cancelled", res.Status)
			}
			a, err := g.decision(r, c, session, "agui-"+res.InterruptID+"-"+res.Status, d)
			if err != nil {
				return err
			}
			rs.through = max(rs.through, a.Seq)
			rs.replay = rs.replay || a.Duplicate
		}
	} else {
		if len(in.Messages) == 0 || in.Messages[len(in.Messages)-1].Role != "user" {
			return fail(http.StatusBadRequest, "the last message must be the user's (or resume an interrupt)")
		}
		last := in.Messages[len(in.Messages)-1]
		a, err := g.submit(r, c, session, "agui-"+last.ID, aguiText(last.Content), in.ForwardedProps.Agent, nil)
		if err != nil {
			return err
		}
		rs.through, rs.replay = a.Seq, a.Duplicate
	}
	st := g.startStream(w, r, sl, nil)
	defer st.close()
	m := newAGUIMapper(session, in.RunID)
	if writeChunks(st, m.started()) != nil {
		return nil
	}
	err = g.relay(st.ctx, rs, st.beat, func(rec live.Record) error {
		return writeChunks(st, m.event(rec.Event))
	}, func(ev live.Event) error {
		return writeChunks(st, m.finish(ev))
	})
	if err != nil && !errors.Is(err, errAnswered) && st.ctx.Err() == nil {
		_ = writeChunks(st, append(m.endText(nil), chunk{"type": "RUN_ERROR", "message": "the stream broke off: " + err.Error(), "code": "stream_cut"}))
	}
	return nil
}
