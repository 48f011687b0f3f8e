package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"golang.org/x/time/rate"
)

// Config configures a gateway.
type Config struct {
	Auth AuthConfig
	// Origins may call the API from a browser (CORS): exact origins
	// ("https://app.example.com"), or "*" for any. None: no browser
	// origin is granted.
	Origins []string
	// Rate and Burst bound each token's requests per second (default 20
	// and 40); past them 429 with Retry-After.
	Rate  float64
	Burst int
	// StreamsPerToken bounds a token's open event streams (default 8;
	// 429 past it); MaxStreams the gateway's (default 10000; 503 past it).
	StreamsPerToken int
	MaxStreams      int
	// MaxBody bounds a request body (default 1 MiB; 413 past it); chat
	// requests, which carry the conversation, MaxChatBody (default 8 MiB).
	MaxBody     int64
	MaxChatBody int64
	// Heartbeat is how often an idle event stream gets a comment (default
	// 15s); WriteTimeout how long one write to a stream may take before
	// the reader counts as gone (default 10s).
	Heartbeat    time.Duration
	WriteTimeout time.Duration
	// Timeout bounds a request to the nodes (default 10s).
	Timeout time.Duration
	Logger  *slog.Logger
	// Local is the node API served by this process, if one is: requests
	// go to it in-process while it serves, a trip through NATS shorter
	// (nodeapi.Client.Via). Without it, or once it stops, they go over
	// NATS to any node.
	Local *nodeapi.Server
}

// MaxHeaderBytes bounds a request's headers (http.Server's
// MaxHeaderBytes; Serve sets it).
const MaxHeaderBytes = 32 << 10

func (c *Config) defaults() {
	if c.Rate == 0 {
		c.Rate = 20
	}
	if c.Burst == 0 {
		c.Burst = 40
	}
	if c.StreamsPerToken == 0 {
		c.StreamsPerToken = 8
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 10000
	}
	if c.MaxBody == 0 {
		c.MaxBody = 1 << 20
	}
	if c.MaxChatBody == 0 {
		c.MaxChatBody = 8 << 20
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Gateway serves lash's client API over HTTP. It holds no state of its
// own: inputs go to the nodes through the node API, events come from the
// LIVE stream, so any number of gateways serve one deployment.
type Gateway struct {
	cfg    Config
	api    *nodeapi.Client
	c      *streams.Client
	auth   *verifier
	hub    *hub
	ctx    context.Context // ends when the gateway drains
	cancel context.CancelFunc
	hubRun sync.WaitGroup

	mu      sync.Mutex
	limits  map[string]*tokenLimit // by Caller.Key
	streams int
}

type tokenLimit struct {
	rate    *rate.Limiter
	streams int
	seen    time.Time
}

// maxTokens bounds the tokens whose limits are remembered; the least
// recently seen is forgotten first.
const maxTokens = 100000

// New makes a gateway over the deployment c serves. It follows live
// events until Close.
func New(c *streams.Client, cfg Config) (*Gateway, error) {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	auth, err := newVerifier(ctx, cfg.Auth)
	if err != nil {
		cancel()
		return nil, err
	}
	api := nodeapi.NewClient(c.Conn(), c.Config().Prefix)
	if cfg.Local != nil {
		api = api.Via(cfg.Local)
	}
	g := &Gateway{cfg: cfg, c: c, api: api, auth: auth,
		hub: newHub(c, cfg.Logger), ctx: ctx, cancel: cancel, limits: map[string]*tokenLimit{}}
	g.hubRun.Go(func() { g.hub.run(ctx) })
	return g, nil
}

// Close ends every open stream (each is told to reconnect) and stops
// following live events.
func (g *Gateway) Close() {
	g.cancel()
	g.hubRun.Wait()
}

// Draining ends the gateway's streams, telling each client to reconnect
// (elsewhere): call it when shutting down, before http.Server.Shutdown,
// which waits for open requests.
func (g *Gateway) Draining() <-chan struct{} { return g.ctx.Done() }

// Handler is the gateway's HTTP API.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	mux.HandleFunc("GET /v1/sessions", g.authed(g.listSessions))
	mux.HandleFunc("POST /v1/sessions", g.authed(g.createSession))
	mux.HandleFunc("GET /v1/sessions/{id}", g.session(g.status))
	mux.HandleFunc("GET /v1/sessions/{id}/messages", g.session(g.transcript))
	mux.HandleFunc("POST /v1/sessions/{id}/messages", g.session(g.sendMessage))
	mux.HandleFunc("POST /v1/sessions/{id}/decisions", g.session(g.decide))
	mux.HandleFunc("POST /v1/sessions/{id}/stop", g.session(g.stop))
	mux.HandleFunc("GET /v1/sessions/{id}/events", g.session(g.events))
	mux.HandleFunc("POST /v1/ai-sdk/chat", g.authed(g.uiChat))
	mux.HandleFunc("GET /v1/ai-sdk/chat/{id}/stream", g.session(g.uiResume))
	mux.HandleFunc("POST /v1/ag-ui", g.authed(g.aguiRun))
	mux.HandleFunc("POST /v1/chat/completions", g.authedWith(g.writeOpenAIError, g.chatCompletions))
	return g.cors(mux)
}

// apiError is an answer other than 2xx, as JSON {"error": ...}.
type apiError struct {
	status int
	msg    string
	retry  time.Duration // Retry-After, if set
}

func (e *apiError) Error() string { return e.msg }

func fail(status int, format string, args ...any) *apiError {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = g.fromNodes(err)
	}
	if e.retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.retry+time.Second-1)/time.Second)))
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lash"`)
	}
	if e.status >= 500 {
		g.cfg.Logger.Warn("gateway request failed", "method", r.Method, "path", r.URL.Path, "status", e.status, "err", e.msg)
	}
	writeJSON(w, e.status, map[string]string{"error": e.msg})
}

// fromNodes maps a node API failure to an HTTP answer.
func (g *Gateway) fromNodes(err error) *apiError {
	var ne *nodeapi.Error
	switch {
	case errors.As(err, &ne):
		status := map[int]int{nodeapi.CodeBadRequest: 400, nodeapi.CodeNotFound: 404, nodeapi.CodeBusy: 409,
			nodeapi.CodeTooLarge: 413}[ne.Code]
		if status == 0 {
			status = http.StatusBadGateway
		}
		return &apiError{status: status, msg: ne.Description}
	case errors.Is(err, nodeapi.ErrNoNode):
		return &apiError{status: http.StatusServiceUnavailable, msg: "no lash node answers", retry: 2 * time.Second}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, msg: "the nodes did not answer in time", retry: time.Second}
	}
	var ue *errUnauthorized
	if errors.As(err, &ue) {
		return &apiError{status: http.StatusUnauthorized, msg: ue.Error()}
	}
	var he *errHub
	if errors.As(err, &he) {
		return &apiError{status: http.StatusServiceUnavailable, msg: he.Error(), retry: 2 * time.Second}
	}
	return &apiError{status: http.StatusBadGateway, msg: err.Error()}
}

// authed authenticates and rate-limits a request before h.
func (g *Gateway) authed(h func(http.ResponseWriter, *http.Request, *Caller) error) http.HandlerFunc {
	return g.authedWith(g.writeError, h)
}

// authedWith is authed answering failures with writeErr.
func (g *Gateway) authedWith(writeErr func(http.ResponseWriter, *http.Request, error), h func(http.ResponseWriter, *http.Request, *Caller) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		caller, err := g.auth.authenticate(r)
		if err != nil {
			writeErr(w, r, err)
			return
		}
		if err := g.admit(caller); err != nil {
			writeErr(w, r, err)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		if err := h(w, r.WithContext(ctx), caller); err != nil {
			writeErr(w, r, err)
		}
	}
}

// session is authed for a route under /v1/sessions/{id}: the id must be
// one the caller may see. Another tenant's session is answered as unknown,
// as one that does not exist is.
func (g *Gateway) session(h func(http.ResponseWriter, *http.Request, *Caller, string) error) http.HandlerFunc {
	return g.authed(func(w http.ResponseWriter, r *http.Request, c *Caller) error {
		id := r.PathValue("id")
		if !plainID(id) {
			return fail(http.StatusBadRequest, "session id: 1 to %d of [A-Za-z0-9_-]", MaxSessionID)
		}
		if !c.Sees(id) {
			return fail(http.StatusNotFound, "unknown session %q", id)
		}
		return h(w, r, c, id)
	})
}

// admit spends one of the caller's requests.
func (g *Gateway) admit(c *Caller) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.limitOf(c)
	if r := l.rate.Reserve(); r.Delay() > 0 {
		d := r.Delay()
		r.Cancel()
		return &apiError{status: http.StatusTooManyRequests, msg: fmt.Sprintf("over %g requests a second", g.cfg.Rate), retry: d}
	}
	return nil
}

func (g *Gateway) limitOf(c *Caller) *tokenLimit {
	l := g.limits[c.Key]
	if l == nil {
		if len(g.limits) >= maxTokens {
			g.forgetOldest()
		}
		l = &tokenLimit{rate: rate.NewLimiter(rate.Limit(g.cfg.Rate), g.cfg.Burst)}
		g.limits[c.Key] = l
	}
	l.seen = time.Now()
	return l
}

// forgetOldest drops the limits of the token seen longest ago with no
// stream open.
func (g *Gateway) forgetOldest() {
	var oldest string
	var at time.Time
	for k, l := range g.limits {
		if l.streams == 0 && (oldest == "" || l.seen.Before(at)) {
			oldest, at = k, l.seen
		}
	}
	delete(g.limits, oldest)
}

// openStream counts a stream against the caller's and the gateway's
// bounds; the release func gives it back.
func (g *Gateway) openStream(c *Caller) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		return nil, &apiError{status: http.StatusServiceUnavailable, msg: "the gateway is shutting down", retry: time.Second}
	}
	if g.streams >= g.cfg.MaxStreams {
		return nil, &apiError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("the gateway holds %d streams, its most", g.cfg.MaxStreams), retry: 5 * time.Second}
	}
	l := g.limitOf(c)
	if l.streams >= g.cfg.StreamsPerToken {
		return nil, &apiError{status: http.StatusTooManyRequests, msg: fmt.Sprintf("the token holds %d streams open, its most", l.streams), retry: 5 * time.Second}
	}
	l.streams++
	g.streams++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		l.streams--
		g.streams--
	}, nil
}

// Streams counts the event streams open now.
func (g *Gateway) Streams() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.streams
}

// cors grants the configured origins, and answers their preflights.
func (g *Gateway) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		granted := origin != "" && (slices.Contains(g.cfg.Origins, "*") || slices.Contains(g.cfg.Origins, origin))
		if granted {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "Retry-After, X-Vercel-AI-UI-Message-Stream")
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			if granted {
				h := w.Header()
				h.Set("Access-Control-Allow-Methods", "GET, POST")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, Lash-Session")
				h.Set("Access-Control-Max-Age", "600")
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readJSON decodes a request body of at most limit bytes into v.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, strict bool) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fail(http.StatusRequestEntityTooLarge, "the body is over %d bytes", limit)
		}
		return fail(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	if dec.More() {
		return fail(http.StatusBadRequest, "invalid JSON body: more after the object")
	}
	return nil
}

// idempotencyKey is the request's Idempotency-Key header, required.
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if k == "" {
		return "", fail(http.StatusBadRequest, "an Idempotency-Key header is required: the same key again is the same input")
	}
	if err := streams.CheckID(k); err != nil {
		return "", fail(http.StatusBadRequest, "Idempotency-Key: %v", err)
	}
	return k, nil
}

// requestCtx bounds a call to the nodes.
func (g *Gateway) requestCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), g.cfg.Timeout)
}
