package nodeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go/micro"
)

// Config configures a Server.
type Config struct {
	// Version is the node's version as SemVer, shown by `nats micro ls`
	// and info. Default "0.0.0".
	Version string
	// Logger logs refused requests at warn and failed ones at error.
	// Default slog.Default().
	Logger *slog.Logger
	// Timeout bounds the handling of one request. Default 30s.
	Timeout time.Duration
	// OnRequest, if set, is called after each request with its endpoint,
	// the code answered (200 on success) and how long handling took. It
	// runs on the request's goroutine: it must be quick and safe for
	// concurrent use.
	OnRequest func(endpoint string, code int, took time.Duration)
}

// ProjectionWait bounds how long a request waits for the node's projection
// to reach the stream's end.
var ProjectionWait = 5 * time.Second

// requestSlack is what a request may hold beyond its input: no request
// larger than the node's input limit and this can carry an input that fits.
const requestSlack = 64 << 10

// Server serves the node API of one node.
type Server struct {
	node    *lash.Node
	proj    *projector.Projector
	cfg     Config
	prefix  string
	leases  *leases.Manager
	svc     micro.Service
	started time.Time

	mu       sync.Mutex
	stopped  bool
	inflight sync.WaitGroup
	refused  []Refusal // a ring of the newest, MaxRefusals at most
	// routes are the endpoints' handlers by endpoint name, and by
	// "session-"+name on sessions' own subjects, for in-process calls.
	routes map[string]route
}

// Start registers the node's micro service on the node's NATS connection
// and serves it until Stop. The node must keep a projection
// (lash.WithProjection): status and the unknown-session checks read it.
func Start(node *lash.Node, cfg Config) (*Server, error) {
	if node.Projection() == nil {
		return nil, errors.New("nodeapi: the node keeps no projection (lash.WithProjection)")
	}
	if cfg.Version == "" {
		cfg.Version = "0.0.0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	c := node.Streams()
	s := &Server{node: node, proj: node.Projection(), cfg: cfg, prefix: c.Config().Prefix,
		leases: leases.New(c, node.Owner()), started: time.Now(), routes: map[string]route{}}
	owner := node.Owner()
	svc, err := micro.AddService(c.Conn(), micro.Config{
		Name:        ServiceName,
		Version:     cfg.Version,
		Description: "lash node " + node.ID(),
		Metadata: map[string]string{"node": node.ID(), "incarnation": owner.Incarnation, "host": owner.Host,
			"pid": strconv.Itoa(owner.PID), "prefix": s.prefix},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			cfg.Logger.Error("node API subscription failed", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("nodeapi: %w", err)
	}
	s.svc = svc
	g := svc.AddGroup(s.prefix + ".api")
	endpoints := []struct {
		name, request string
		handle        func(context.Context, []byte) (any, error)
		opts          []micro.EndpointOpt
	}{
		{EndpointSubmit, `{"session","key","text","decisions","cancel","agent","labels"}`, s.submit, nil},
		{EndpointStatus, `{"session"}`, s.status, nil},
		{EndpointDecide, `{"session","key","call_id","action","mode","payload"}`, s.decide, nil},
		{EndpointCancel, `{"session","key","turn"}`, s.cancel, nil},
		{EndpointLive, `{"session","after","limit"}`, s.live, nil},
		{EndpointSessions, `{"prefix","after","limit","ids"}`, s.sessions, nil},
		{EndpointTranscript, `{"session","from","limit"}`, s.transcript, nil},
		{EndpointProcessStart, `{"id","tool","args","external_ref","disposition","wake_session","label"}`, s.processStart, nil},
		{EndpointProcessStatus, `{"id"}`, s.processStatus, nil},
		{EndpointProcessCancel, `{"id","reason"}`, s.processCancel, nil},
		{EndpointProcessAwait, `{"id","timeout_ms"}`, s.processAwait, nil},
		{EndpointStep, `{"ticket","id","value"}`, s.step, nil},
		{EndpointEventKey, `{"ticket","name"}`, s.eventKey, nil},
		{EndpointAwaitEvent, `{"ticket","name","timeout_ms"}`, s.awaitEvent, nil},
		// Every node answers info, so a client can list them all.
		{EndpointInfo, `{}`, s.info, []micro.EndpointOpt{micro.WithEndpointQueueGroupDisabled()}},
	}
	for _, e := range endpoints {
		opts := append(e.opts, micro.WithEndpointMetadata(map[string]string{"request": e.request}))
		plain := func(ctx context.Context, _ string, data []byte) (any, error) { return e.handle(ctx, data) }
		s.routes[e.name] = plain
		if err := g.AddEndpoint(e.name, s.subjectHandler(e.name, plain), opts...); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("nodeapi: endpoint %s: %w", e.name, err)
		}
		if !slices.Contains(SessionEndpoints, e.name) {
			continue
		}
		handle := e.handle
		if e.name == EndpointSubmit {
			handle = s.submitMessage
		}
		opts = append(opts, micro.WithEndpointSubject("sess.*."+e.name))
		s.routes["session-"+e.name] = s.sessionHandler(e.name, handle)
		if err := g.AddEndpoint("session-"+e.name, s.subjectHandler(e.name, s.routes["session-"+e.name]), opts...); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("nodeapi: endpoint session-%s: %w", e.name, err)
		}
	}
	// Once Start returns, the server knows the subscriptions.
	if err := c.Conn().Flush(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("nodeapi: %w", err)
	}
	return s, nil
}

// ID is the service instance's id, as `nats micro ls` shows it.
func (s *Server) ID() string { return s.svc.Info().ID }

// Stop stops taking requests and waits for those being handled.
func (s *Server) Stop() error {
	err := s.svc.Stop()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.inflight.Wait()
	return err
}

// sessionHandler answers endpoint on a session's own subject: the session
// is the subject's token, and a request that names another is refused.
func (s *Server) sessionHandler(endpoint string, handle func(context.Context, []byte) (any, error)) route {
	return func(ctx context.Context, subject string, data []byte) (any, error) {
		tok, ok := strings.CutPrefix(subject, s.prefix+".api.sess.")
		if ok {
			tok, ok = strings.CutSuffix(tok, "."+endpoint)
		}
		session, err := streams.ParseToken(tok)
		if !ok || err != nil {
			return nil, badRequest("subject %s names no session", subject)
		}
		if limit := s.node.MaxInputBytes(); len(data) > limit+requestSlack {
			return handle(ctx, data) // refused for its size, unread
		}
		fields := map[string]json.RawMessage{}
		if len(bytes.TrimSpace(data)) != 0 {
			if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
				return handle(ctx, data) // refused as the endpoint refuses it
			}
		}
		for k := range fields {
			// encoding/json matches field names without regard to case,
			// Unicode's included ("ſession" is "session"): only the
			// exact name is checked, so no other spelling may pass.
			if k != "session" && strings.EqualFold(k, "session") {
				return nil, badRequest("field %q: the session goes as \"session\", or by the subject alone", k)
			}
		}
		if raw, ok := fields["session"]; ok {
			var named string
			if json.Unmarshal(raw, &named) != nil || named != session {
				return nil, badRequest("the request names another session than its subject's (%q)", session)
			}
			return handle(ctx, data) // it names its subject's: as it is
		}
		fields["session"], _ = json.Marshal(session)
		data, _ = json.Marshal(fields)
		return handle(ctx, data)
	}
}

// route handles a request to one endpoint, given the subject it came on.
type route func(ctx context.Context, subject string, data []byte) (any, error)

// subjectHandler answers a request synchronously: micro reads the outcome
// of a request when its handler returns.
func (s *Server) subjectHandler(endpoint string, handle route) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		if reply := r.Reply(); s.landsInStream(reply) {
			// The answer would be published where lash's streams capture
			// it (another session's inputs, a tool's endpoint, the
			// JetStream API): nothing is done and nothing answered.
			e := badRequest("reply subject %s is the deployment's or the server's, not an inbox", clipSubject(reply))
			s.refuse(endpoint, e, r.Data())
			s.cfg.Logger.Warn("node API request refused", "endpoint", endpoint, "code", e.Code, "reason", e.Description)
			if s.cfg.OnRequest != nil {
				s.cfg.OnRequest(endpoint, e.Code, 0)
			}
			return
		}
		if !s.enter() {
			// Delivered while the service drained: say so at once, so the
			// caller asks again (another node answers) instead of waiting.
			_ = r.Error(strconv.Itoa(CodeBusy), "node "+s.node.ID()+" is stopping; ask again", nil)
			return
		}
		defer s.inflight.Done()
		resp, e := s.serve(context.Background(), endpoint, handle, r.Subject(), r.Data())
		var err error
		if e == nil {
			err = r.RespondJSON(resp)
		} else {
			err = r.Error(strconv.Itoa(e.Code), e.Description, nil)
		}
		if err != nil {
			s.cfg.Logger.Warn("node API reply failed", "endpoint", endpoint, "err", err)
		}
	})
}

// enter counts a request in, unless the server has stopped; the caller
// calls s.inflight.Done when it is handled.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.inflight.Add(1)
	return true
}

// serve handles one request, from NATS or in-process (Client.Via): the
// refusals are kept, logged and counted alike.
func (s *Server) serve(ctx context.Context, endpoint string, handle route, subject string, data []byte) (any, *Error) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	resp, err := handle(ctx, subject, data)
	code := 200
	var e *Error
	if err != nil {
		e = classify(err)
		code = e.Code
		if code < 500 {
			// Kept before the answer, so a client that was refused
			// finds it in info at once.
			s.refuse(endpoint, e, data)
		}
		log := s.cfg.Logger.Warn
		if code >= 500 {
			log = s.cfg.Logger.Error
		}
		log("node API request refused", "endpoint", endpoint, "code", code, "reason", e.Description)
		resp = nil
	}
	if s.cfg.OnRequest != nil {
		s.cfg.OnRequest(endpoint, code, time.Since(began))
	}
	return resp, e
}

// landsInStream reports whether a reply published on subject could be
// captured by a stream or bucket: the deployment's subjects, and the
// server's own ($JS, $KV, $O, $SYS ...). Replies go to inboxes.
func (s *Server) landsInStream(subject string) bool {
	return strings.HasPrefix(subject, s.prefix+".") || strings.HasPrefix(subject, "$")
}

func clipSubject(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}

// classify maps a handler's error to the code and description answered.
func classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Code: e.Code, Description: oneLine(e.Description)}
	}
	code := CodeInternal
	switch {
	case errors.Is(err, lash.ErrBadInput), errors.Is(err, sessionlog.ErrInvalid), errors.Is(err, streams.ErrBadID):
		code = CodeBadRequest
	case errors.Is(err, lash.ErrBusy), errors.Is(err, lash.ErrClosed), errors.Is(err, lash.ErrKeyConflict):
		code = CodeBusy
	}
	return &Error{Code: code, Description: oneLine(err.Error())}
}

func badRequest(format string, args ...any) *Error {
	return &Error{Code: CodeBadRequest, Description: fmt.Sprintf(format, args...)}
}

type request interface{ missing() []string }

// decode reads a request strictly: one JSON object, no unknown fields,
// every required field present.
func (s *Server) decode(data []byte, v request, emptyOK bool) error {
	if limit := s.node.MaxInputBytes(); len(data) > limit+requestSlack {
		return &Error{Code: CodeTooLarge, Description: fmt.Sprintf("request is %d bytes; an input holds at most %d", len(data), limit)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if emptyOK {
			return nil
		}
		return badRequest("empty request: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typ) && typ.Field != "":
			return badRequest("field %s: want a %s, not a JSON %s", typ.Field, typ.Type, typ.Value)
		case errors.As(err, &typ):
			return badRequest("want a JSON object, not a JSON %s", typ.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badRequest("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("invalid JSON: %v", err)
		}
		return badRequest("invalid request: %v", err)
	}
	if dec.More() {
		return badRequest("invalid JSON: more data after the request object")
	}
	if m := v.missing(); len(m) == 1 {
		return badRequest("missing field: %s", m[0])
	} else if len(m) > 1 {
		return badRequest("missing fields: %s", strings.Join(m, "; "))
	}
	return nil
}

// checkSize refuses an input lash would refuse for its size.
func (s *Server) checkSize(in lash.Input) error {
	data, err := json.Marshal(in)
	if err != nil {
		return badRequest("input: %v", err)
	}
	if limit := s.node.MaxInputBytes(); len(data) > limit {
		return &Error{Code: CodeTooLarge, Description: fmt.Sprintf("input is %d bytes, at most %d", len(data), limit)}
	}
	return nil
}

// head is the session's head once the projection holds everything the
// SESSIONS stream held at the call; an unknown session is a 404.
func (s *Server) head(ctx context.Context, session string) (*projector.SessionHead, error) {
	if _, err := streams.Token(session); err != nil {
		return nil, badRequest("session: %v", err)
	}
	// Requests to one endpoint over NATS are handled one at a time: a
	// projection that lags must not hold the queue for long (caughtUp
	// waits at most ProjectionWait).
	if err := s.caughtUp(ctx); err != nil {
		return nil, err
	}
	h, err := s.proj.Session(session)
	if errors.Is(err, projector.ErrNotFound) {
		return nil, &Error{Code: CodeNotFound, Description: fmt.Sprintf("unknown session %q: its log is empty", session)}
	}
	return h, err
}

func (s *Server) send(ctx context.Context, session, key string, in lash.Input) (any, error) {
	if err := s.checkSize(in); err != nil {
		return nil, err
	}
	seq, dup, err := s.node.Session(session).Send(ctx, key, in)
	if err != nil {
		return nil, err
	}
	return Accepted{Seq: seq, Duplicate: dup}, nil
}

func (s *Server) submit(ctx context.Context, data []byte) (any, error) {
	var req SubmitRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	return s.send(ctx, req.Session, req.Key, req.input())
}

// submitMessage is submit on a session's own subject: a message only, as
// the session's input subject takes.
func (s *Server) submitMessage(ctx context.Context, data []byte) (any, error) {
	var req SubmitRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	if req.input().Decides() {
		return nil, badRequest("decisions and cancels go to the session's decide and cancel endpoints, not submit")
	}
	if strings.Contains(req.Agent, "@") {
		return nil, badRequest("a pin (%s) comes from operators: a session's own submit names an agent by its name only", req.Agent)
	}
	return s.send(ctx, req.Session, req.Key, req.input())
}

func (s *Server) decide(ctx context.Context, data []byte) (any, error) {
	var req DecideRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	if _, err := s.head(ctx, req.Session); err != nil {
		return nil, err
	}
	return s.send(ctx, req.Session, req.Key, lash.Input{Decisions: []lash.Decision{req.decision()}})
}

func (s *Server) cancel(ctx context.Context, data []byte) (any, error) {
	var req CancelRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	if _, err := s.head(ctx, req.Session); err != nil {
		return nil, err
	}
	return s.send(ctx, req.Session, req.Key, lash.Input{Cancel: true, Turn: req.Turn})
}

func (s *Server) status(ctx context.Context, data []byte) (any, error) {
	var req StatusRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	h, err := s.head(ctx, req.Session)
	if err != nil {
		return nil, err
	}
	st := s.statusOf(h)
	if st.SuspendedCalls, err = s.suspendedCalls(h); err != nil {
		return nil, err
	}
	return st, nil
}

func (s *Server) info(ctx context.Context, data []byte) (any, error) {
	var req InfoRequest
	if err := s.decode(data, &req, true); err != nil {
		return nil, err
	}
	running, err := s.Running(ctx)
	if err != nil {
		return nil, err
	}
	o := s.node.Owner()
	s.mu.Lock()
	refused := append([]Refusal(nil), s.refused...)
	s.mu.Unlock()
	return &Info{Node: s.node.ID(), Incarnation: o.Incarnation, Host: o.Host, PID: o.PID, Version: s.cfg.Version,
		Prefix: s.prefix, Started: s.started, Uptime: time.Since(s.started).Seconds(),
		Running: running, Applied: s.proj.Applied(), Tools: s.node.ToolNames(), Refused: refused}, nil
}

// refuse keeps a refused request where info shows it.
func (s *Server) refuse(endpoint string, e *Error, data []byte) {
	data = bytes.Clone(data[:min(len(data), 1<<10)])
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refused) == MaxRefusals {
		s.refused = append(s.refused[:0], s.refused[1:]...)
	}
	s.refused = append(s.refused, Refusal{At: time.Now().UTC(), Endpoint: endpoint, Code: e.Code, Reason: e.Description, Data: data})
}

// Running counts the sessions whose lease this node holds, read from the
// lease bucket.
func (s *Server) Running(ctx context.Context) (int, error) {
	hs, err := s.leases.List(ctx, "sess.")
	if err != nil {
		return 0, err
	}
	me, n := s.node.Owner(), 0
	for _, h := range hs {
		if h.Owner.ID == me.ID && h.Owner.Incarnation == me.Incarnation {
			n++
		}
	}
	return n, nil
}

// call serves a request made in-process, as it would come over NATS on
// subject; served is false when the server has stopped, and the caller
// asks over NATS, where another node answers. As over NATS, the request
// runs under the server's timeout, not the caller's context: a caller
// that gives up (its deadline, its client gone) gets its context's error
// at once, and the request still finishes, as one the caller stopped
// waiting for does.
func (s *Server) call(ctx context.Context, endpoint, subject string, data []byte) (body []byte, err error, served bool) {
	name := endpoint
	if strings.HasPrefix(subject, s.prefix+".api.sess.") {
		name = "session-" + endpoint
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nodeapi: %s: %w", endpoint, err), true // never sent, as over NATS
	}
	h := s.routes[name]
	if h == nil || !s.enter() {
		return nil, nil, false
	}
	var resp any
	var e *Error
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer s.inflight.Done()
		resp, e = s.serve(context.WithoutCancel(ctx), endpoint, h, subject, data)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("nodeapi: %s: %w", endpoint, ctx.Err()), true
	}
	if e != nil {
		e.Endpoint = endpoint
		return nil, e, true
	}
	if body, err = json.Marshal(resp); err != nil {
		return nil, fmt.Errorf("nodeapi: %s: %w", endpoint, err), true
	}
	return body, nil, true
}
