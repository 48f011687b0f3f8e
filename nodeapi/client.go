package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// DefaultTimeout bounds a request when its context has no deadline.
const DefaultTimeout = 10 * time.Second

// ErrNoNode: no node of the deployment answered.
var ErrNoNode = errors.New("nodeapi: no lash node answers")

// Client calls the node API of a deployment. It is safe for concurrent use.
type Client struct {
	nc     *nats.Conn
	prefix string
	local  *Server
}

// NewClient returns a client for the deployment with prefix (empty means
// streams.DefaultPrefix) reached through nc.
func NewClient(nc *nats.Conn, prefix string) *Client {
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	return &Client{nc: nc, prefix: prefix}
}

// Via returns a client that hands requests to s, a node API served by
// this process, without a trip through NATS, while s serves; once s
// stops, it asks over NATS, where the other nodes answer. s handles,
// refuses, keeps and counts a request as it does one from NATS; only
// what NATS itself adds is not there: its payload limit, and one request
// at a time per endpoint.
func (c *Client) Via(s *Server) *Client {
	v := *c
	v.local = s
	return &v
}

// The session methods ask the session's own subject (SessionSubject), so
// a client allowed only one session's endpoints can use them.

// Submit appends a user message to a session; decisions and cancels go
// through Decide and Cancel.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (Accepted, error) {
	var out Accepted
	return out, c.callSession(ctx, req.Session, EndpointSubmit, req, &out)
}

// Status returns a session's head.
func (c *Client) Status(ctx context.Context, session string) (*Status, error) {
	var out Status
	if err := c.callSession(ctx, session, EndpointStatus, StatusRequest{Session: session}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Decide resumes or cancels a suspended tool call.
func (c *Client) Decide(ctx context.Context, req DecideRequest) (Accepted, error) {
	var out Accepted
	return out, c.callSession(ctx, req.Session, EndpointDecide, req, &out)
}

// Cancel asks a session's running turn to stop at its next safe boundary;
// key is the request's idempotency key.
func (c *Client) Cancel(ctx context.Context, session, key string) (Accepted, error) {
	var out Accepted
	return out, c.callSession(ctx, session, EndpointCancel, CancelRequest{Session: session, Key: key}, &out)
}

// Stop asks the session's turn turnID ("in-<seq>") to stop: once that
// turn has committed, the stop changes nothing.
func (c *Client) Stop(ctx context.Context, session, key, turnID string) (Accepted, error) {
	var out Accepted
	return out, c.callSession(ctx, session, EndpointCancel, CancelRequest{Session: session, Key: key, Turn: turnID}, &out)
}

// Sessions lists sessions (see SessionsRequest).
func (c *Client) Sessions(ctx context.Context, req SessionsRequest) (*SessionsPage, error) {
	var out SessionsPage
	if err := c.call(ctx, EndpointSessions, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Transcript reads a session's committed messages (see TranscriptRequest).
func (c *Client) Transcript(ctx context.Context, req TranscriptRequest) (*TranscriptPage, error) {
	var out TranscriptPage
	if err := c.call(ctx, EndpointTranscript, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Info returns the first node's answer about itself.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	var out Info
	if err := c.call(ctx, EndpointInfo, InfoRequest{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NodesQuiet ends Nodes once no node has answered for this long after the
// first answer.
const NodesQuiet = 200 * time.Millisecond

// Nodes asks every node about itself and returns the answers in the order
// they came, once none has come for NodesQuiet after the first, or at
// ctx's deadline (2s when it has none). No answer at all is ErrNoNode.
func (c *Client) Nodes(ctx context.Context) ([]Info, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	inbox := c.nc.NewRespInbox()
	msgs := make(chan *nats.Msg, 4096) // one answer per node
	sub, err := c.nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return nil, fmt.Errorf("nodeapi: %w", err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.PublishRequest(Subject(c.prefix, EndpointInfo), inbox, []byte("{}")); err != nil {
		return nil, fmt.Errorf("nodeapi: %w", err)
	}
	var out []Info
	var quiet <-chan time.Time
	for {
		select {
		case m := <-msgs:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				if len(out) == 0 {
					return nil, fmt.Errorf("%w on %s", ErrNoNode, Subject(c.prefix, EndpointInfo))
				}
				continue
			}
			var info Info
			if err := answer(EndpointInfo, m, &info); err != nil {
				return out, err
			}
			out = append(out, info)
			quiet = time.After(NodesQuiet)
		case <-quiet:
			return out, nil
		case <-ctx.Done():
			if len(out) == 0 {
				return nil, fmt.Errorf("%w: %v", ErrNoNode, ctx.Err())
			}
			return out, nil
		}
	}
}

// Do sends data to endpoint as it is and returns the answer's body, or the
// node's refusal as *Error. It is for requests the typed methods do not
// make.
func (c *Client) Do(ctx context.Context, endpoint string, data []byte) ([]byte, error) {
	return c.do(ctx, endpoint, Subject(c.prefix, endpoint), data)
}

func (c *Client) do(ctx context.Context, endpoint, subject string, data []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	if c.local != nil && c.local.prefix == c.prefix {
		if body, err, served := c.local.call(ctx, endpoint, subject, data); served {
			return body, err
		}
	}
	m, err := c.nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w on %s", ErrNoNode, subject)
	}
	if err != nil {
		return nil, fmt.Errorf("nodeapi: %s: %w", endpoint, err)
	}
	if err := answer(endpoint, m, nil); err != nil {
		return nil, err
	}
	return m.Data, nil
}

func (c *Client) call(ctx context.Context, endpoint string, req, out any) error {
	return c.callSubject(ctx, endpoint, Subject(c.prefix, endpoint), req, out)
}

func (c *Client) callSession(ctx context.Context, session, endpoint string, req, out any) error {
	subject, err := SessionSubject(c.prefix, session, endpoint)
	if err != nil {
		return err
	}
	return c.callSubject(ctx, endpoint, subject, req, out)
}

func (c *Client) callSubject(ctx context.Context, endpoint, subject string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("nodeapi: %s: %w", endpoint, err)
	}
	body, err := c.do(ctx, endpoint, subject, data)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("nodeapi: %s: unreadable answer: %w", endpoint, err)
	}
	return nil
}

// answer returns the refusal m carries as *Error, or decodes its body into
// out when out is not nil.
func answer(endpoint string, m *nats.Msg, out any) error {
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, err := strconv.Atoi(code)
		if err != nil {
			n = CodeInternal
		}
		return &Error{Endpoint: endpoint, Code: n, Description: m.Header.Get(micro.ErrorHeader)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("nodeapi: %s: unreadable answer: %w", endpoint, err)
	}
	return nil
}
