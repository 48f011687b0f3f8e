package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lash-run/lash/streams"
)

// EndpointLive reads a session's live events after a cursor: what a
// client that follows <prefix>.live.<session> missed while it was away,
// without the JetStream API (whose pulls deliver to any reply subject).
const EndpointLive = "live"

// Bounds of one live page.
const (
	// DefaultLiveLimit and MaxLiveLimit bound the events of a page.
	DefaultLiveLimit = 100
	MaxLiveLimit     = 1000
	// MaxLiveBytes bounds a page's events, within a NATS message.
	MaxLiveBytes = 512 << 10
)

// LiveRequest asks for a session's live events after sequence After (0:
// from the first one kept), at most Limit of them.
type LiveRequest struct {
	Session string `json:"session"`
	After   uint64 `json:"after,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

func (r *LiveRequest) missing() []string { return need(nil, "session", r.Session) }

// LiveRecord is one live event with its sequence on the LIVE stream, the
// cursor to ask after next.
type LiveRecord struct {
	Seq   uint64          `json:"seq"`
	Event json.RawMessage `json:"event"`
}

// LivePage answers live: the session's events after the cursor, in order,
// up to the limit or MaxLiveBytes; More says others follow. First and Last
// are the first and last sequences the stream keeps: a cursor below
// First-1 missed events the stream no longer holds (the session log holds
// the facts).
type LivePage struct {
	Records []LiveRecord `json:"records"`
	More    bool         `json:"more"`
	First   uint64       `json:"first"`
	Last    uint64       `json:"last"`
}

var errPageFull = errors.New("page full")

func (s *Server) live(ctx context.Context, data []byte) (any, error) {
	var req LiveRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	switch {
	case req.Limit < 0 || req.Limit > MaxLiveLimit:
		return nil, badRequest("limit %d: 1 to %d (0: %d)", req.Limit, MaxLiveLimit, DefaultLiveLimit)
	case req.Limit == 0:
		req.Limit = DefaultLiveLimit
	}
	c := s.node.Streams()
	subj, err := c.Subjects().Live(req.Session)
	if err != nil {
		return nil, badRequest("session: %v", err)
	}
	page := &LivePage{Records: []LiveRecord{}}
	if page.First, page.Last, err = c.Bounds(ctx, streams.Live); err != nil {
		return nil, err
	}
	size := 0
	err = c.Read(ctx, subj, req.After+1, func(m *streams.Msg) error {
		ev := json.RawMessage(m.Data)
		if !json.Valid(ev) {
			ev, _ = json.Marshal(map[string]string{"type": "unreadable", "session": req.Session, "error": "not JSON"})
		}
		if len(page.Records) == req.Limit || size+len(ev) > MaxLiveBytes && len(page.Records) > 0 {
			page.More = true
			return errPageFull
		}
		size += len(ev) + 32
		page.Records = append(page.Records, LiveRecord{Seq: m.Seq, Event: ev})
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return nil, fmt.Errorf("reading live events: %w", err)
	}
	return page, nil
}

// Live reads a session's live events after a cursor (see LiveRequest).
func (c *Client) Live(ctx context.Context, session string, after uint64, limit int) (*LivePage, error) {
	var out LivePage
	if err := c.callSession(ctx, session, EndpointLive, LiveRequest{Session: session, After: after, Limit: limit}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
