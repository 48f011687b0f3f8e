package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// Meta keys a call carries in its request's _meta.
const (
	MetaIdempotencyKey = "lash/idempotency_key"
	MetaAttempt        = "lash/attempt"
	MetaInDoubt        = "lash/in_doubt"
	// MetaCallTicket is the call's ticket (tools.CallTicket): with it the
	// server records steps and awaits events through the node API, as
	// tools served over NATS do.
	MetaCallTicket = "lash/call_ticket"
)

// DefaultMaxResultBytes bounds a tool result's text when
// Server.MaxResultBytes is zero: 4 MiB.
const DefaultMaxResultBytes = 4 << 20

// ErrInvalidServer refuses a server configuration.
var ErrInvalidServer = errors.New("mcptool: invalid server")

// Server is one MCP server a deployment lists.
type Server struct {
	// Name prefixes its tools' names: <name>__<tool>.
	Name string `json:"name" yaml:"name"`
	// Command runs the server as a child process speaking over its
	// standard input and output (stdio).
	Command []string `json:"command,omitempty" yaml:"command,omitempty"`
	// URL is a streamable HTTP endpoint.
	URL string `json:"url,omitempty" yaml:"url,omitempty"`
	// Headers go with every HTTP request (credentials): never logged,
	// shown or journaled.
	Headers map[string]string `json:"-" yaml:"-"`
	// Env is the environment of a command besides PATH, HOME, TMPDIR and
	// LANG: it gets none of the node's.
	Env map[string]string `json:"-" yaml:"-"`
	// MaxResultBytes bounds a result's text; a longer one is a failed
	// call. Zero means DefaultMaxResultBytes.
	MaxResultBytes int `json:"max_result_bytes,omitempty" yaml:"max_result_bytes,omitempty"`
}

// Check reports what is wrong with s.
func (s Server) Check() error {
	switch {
	case s.Name == "" || len(s.Name) > 32 || strings.Contains(s.Name, "__"):
		return fmt.Errorf("%w: name %q: 1 to 32 letters, digits, '_' and '-', without \"__\"", ErrInvalidServer, s.Name)
	case tools.CheckName(s.Name) != nil:
		return fmt.Errorf("%w: name %q: use letters, digits, '_' and '-'", ErrInvalidServer, s.Name)
	case (len(s.Command) == 0) == (s.URL == ""):
		return fmt.Errorf("%w: %s: give a command or a url, one of them", ErrInvalidServer, s.Name)
	case s.URL != "" && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://"):
		return fmt.Errorf("%w: %s: url %q is not http(s)", ErrInvalidServer, s.Name, s.URL)
	case s.MaxResultBytes < 0:
		return fmt.Errorf("%w: %s: negative max_result_bytes", ErrInvalidServer, s.Name)
	}
	return nil
}

// Source is a connection to one MCP server, made when first needed and
// again after it broke (a server that exited, a dropped connection).
type Source struct {
	srv    Server
	client *mcp.Client
	// dial is held while connecting, so one caller connects and the others
	// wait for it, each within its own context.
	dial chan struct{}

	mu      sync.Mutex
	session *conn
}

// conn is an open session and, for a stdio server, its process.
type conn struct {
	session *mcp.ClientSession
	proc    *exec.Cmd
}

// close ends the session and the process, which gets its stdin closed and
// then, if it lingers, is killed.
func (c *conn) close() {
	_ = c.session.Close()
	if c.proc == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = c.proc.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = c.proc.Process.Kill()
		<-done
	}
}

// New returns the source of srv's tools; nothing connects yet.
func New(srv Server, version string) (*Source, error) {
	if err := srv.Check(); err != nil {
		return nil, err
	}
	if srv.MaxResultBytes == 0 {
		srv.MaxResultBytes = DefaultMaxResultBytes
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "lash", Version: version}, nil)
	return &Source{srv: srv, client: c, dial: make(chan struct{}, 1)}, nil
}

// frameBytes is what a response may carry beyond its result's text: the
// JSON-RPC framing and escapes.
const frameBytes = 1 << 20

// Name is the server's name.
func (s *Source) Name() string { return s.srv.Name }

// connect returns the open session, connecting when there is none; it
// gives up when ctx ends, a server that never answers included.
func (s *Source) connect(ctx context.Context) (*conn, error) {
	select {
	case s.dial <- struct{}{}:
		defer func() { <-s.dial }()
	case <-ctx.Done():
		return nil, fmt.Errorf("mcptool: connecting to %s: %w", s.srv.Name, ctx.Err())
	}
	s.mu.Lock()
	c := s.session
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c = &conn{}
	var t mcp.Transport
	limit := s.srv.MaxResultBytes + frameBytes
	if len(s.srv.Command) > 0 {
		// The process outlives the call that started it: not ctx's. It
		// gets a bare environment: the node's secrets are not its.
		cmd := exec.Command(s.srv.Command[0], s.srv.Command[1:]...)
		cmd.Env = childEnv(s.srv.Env)
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("mcptool: starting %s: %w", s.srv.Name, err)
		}
		c.proc = cmd
		t = &mcp.IOTransport{Reader: out, Writer: in, MaxLineLength: limit}
	} else {
		hc := &http.Client{Transport: headers{h: s.srv.Headers, limit: int64(limit), next: http.DefaultTransport}}
		t = &mcp.StreamableClientTransport{Endpoint: s.srv.URL, HTTPClient: hc, MaxRetries: -1}
	}
	sess, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		if c.proc != nil {
			_ = c.proc.Process.Kill()
			_ = c.proc.Wait()
		}
		return nil, fmt.Errorf("mcptool: connecting to %s: %w", s.srv.Name, err)
	}
	c.session = sess
	s.mu.Lock()
	s.session = c
	s.mu.Unlock()
	return c, nil
}

// childEnv is a server process's environment: what finds programs and a
// home, and what its entry names.
func childEnv(extra map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// drop forgets a connection that broke, so the next use connects again.
func (s *Source) drop(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == c {
		s.session = nil
		go c.close()
	}
}

// Close ends the session, and the server's process if it runs one.
func (s *Source) Close() error {
	s.mu.Lock()
	c := s.session
	s.session = nil
	s.mu.Unlock()
	if c != nil {
		c.close()
	}
	return nil
}

// Tools lists the server's tools as lash tools named <server>__<tool>;
// problems are the tools left out (a name or schema no model takes).
func (s *Source) Tools(ctx context.Context) (ts []tools.Tool, problems []string, err error) {
	c, err := s.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	for t, err := range c.session.Tools(ctx, nil) {
		if err != nil {
			if broken(err) {
				s.drop(c)
			}
			return nil, nil, fmt.Errorf("mcptool: listing the tools of %s: %w", s.srv.Name, err)
		}
		name := s.srv.Name + "__" + t.Name
		if err := tools.CheckName(name); err != nil {
			problems = append(problems, fmt.Sprintf("MCP tool %q of %s is left out: %v", t.Name, s.srv.Name, err))
			continue
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || len(schema) == 0 || schema[0] != '{' {
			problems = append(problems, fmt.Sprintf("MCP tool %q of %s is left out: its input schema is not a JSON object", t.Name, s.srv.Name))
			continue
		}
		ts = append(ts, &tool{src: s, remote: t.Name, spec: turn.ToolSpec{Name: name, Description: t.Description, Schema: string(schema)}})
	}
	return ts, problems, nil
}

// tool is one tool of an MCP server.
type tool struct {
	src    *Source
	remote string
	spec   turn.ToolSpec
}

func (t *tool) Spec() turn.ToolSpec { return t.spec }

// Call calls the tool with lash's idempotency key, attempt and in-doubt
// flag in the request's _meta. Whatever fails (the server unreachable, its
// process gone mid-call, a result over the bound) is a failed call the
// model reads; the end of ctx is left to the Runner, which knows its
// deadline.
func (t *tool) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a map[string]any
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return tools.Result{Status: turn.ToolError, Output: "the arguments are not a JSON object: " + err.Error()}, nil
		}
	}
	meta := mcp.Meta{}
	if info, ok := tools.Info(ctx); ok {
		meta[MetaIdempotencyKey] = info.IdempotencyKey()
		meta[MetaAttempt] = info.Attempt
		meta[MetaInDoubt] = info.InDoubt
		if ticket, err := tools.CallTicket(ctx); err == nil {
			meta[MetaCallTicket] = ticket
		}
	}
	c, err := t.src.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{}, ctx.Err()
		}
		return failed(err.Error()), nil
	}
	res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Meta: meta, Name: t.remote, Arguments: a})
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{}, ctx.Err()
		}
		if broken(err) {
			// The process exited or the connection went: the next call
			// starts afresh. An error the server answered leaves the
			// session, and the other calls on it, as they are.
			t.src.drop(c)
		}
		if errors.Is(err, errTooLarge) || strings.Contains(err.Error(), "maximum line length") {
			return failed(fmt.Sprintf("the result of %s is over the bound of %d bytes", t.spec.Name, t.src.srv.MaxResultBytes)), nil
		}
		return failed(fmt.Sprintf("MCP server %s: %v", t.src.srv.Name, err)), nil
	}
	text, size := resultText(res, t.src.srv.MaxResultBytes)
	if size > t.src.srv.MaxResultBytes {
		return failed(fmt.Sprintf("the result of %s is %d bytes, over the bound of %d", t.spec.Name, size, t.src.srv.MaxResultBytes)), nil
	}
	if res.IsError {
		return tools.Result{Status: turn.ToolError, Output: text}, nil
	}
	return tools.Result{Status: turn.ToolOK, Output: text}, nil
}

func failed(msg string) tools.Result { return tools.Result{Status: turn.ToolError, Output: msg} }

// resultText is the text a model is shown: the text blocks joined by
// newlines, other blocks as their JSON, or the structured content when
// there is no block. size counts it all, stopping past max.
func resultText(res *mcp.CallToolResult, max int) (string, int) {
	var b strings.Builder
	for i, c := range res.Content {
		if b.Len() > max {
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
			continue
		}
		j, _ := json.Marshal(c)
		b.Write(j)
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		j, _ := json.Marshal(res.StructuredContent)
		b.Write(j)
	}
	return b.String(), b.Len()
}

// broken reports whether err means the connection is gone, not that the
// server answered with an error.
func broken(err error) bool {
	var answered *jsonrpc.Error
	return !errors.As(err, &answered)
}

// headers adds a server's headers to its requests, and caps what a
// response body may hold.
type headers struct {
	h     map[string]string
	limit int64
	next  http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.h {
			r.Header.Set(k, v)
		}
	}
	res, err := h.next.RoundTrip(r)
	if res != nil && res.Body != nil {
		res.Body = &capped{rc: res.Body, left: h.limit}
	}
	return res, err
}

// errTooLarge ends a response past the cap.
var errTooLarge = errors.New("mcptool: the server's response is over the result bound")

// capped reads at most left bytes, then fails.
type capped struct {
	rc   io.ReadCloser
	left int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.rc.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *capped) Close() error { return c.rc.Close() }

// fileServer is a server as a servers file writes it: header values are
// "env:NAME" (read from the environment), "file:PATH" (read from a file,
// trimmed) or the value itself.
type fileServer struct {
	Server  `yaml:",inline"`
	Headers map[string]string `yaml:"headers,omitempty"`
	Env     map[string]string `yaml:"env,omitempty"`
}

// ParseServers reads a servers file (YAML or JSON): a list of servers, each
// with a name and a command or a url, optional headers and
// max_result_bytes. Header values are resolved now, so a missing secret
// fails the start.
func ParseServers(data []byte, getenv func(string) string) ([]Server, error) {
	var fs []fileServer
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fs); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrInvalidServer, err)
	}
	seen := map[string]bool{}
	out := make([]Server, 0, len(fs))
	for _, f := range fs {
		s := f.Server
		if err := s.Check(); err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%w: %s is listed twice", ErrInvalidServer, s.Name)
		}
		seen[s.Name] = true
		for k, v := range f.Headers {
			val, err := resolve(v, getenv)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: header %s: %v", ErrInvalidServer, s.Name, k, err)
			}
			if s.Headers == nil {
				s.Headers = map[string]string{}
			}
			s.Headers[k] = val
		}
		for k, v := range f.Env {
			val, err := resolve(v, getenv)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: env %s: %v", ErrInvalidServer, s.Name, k, err)
			}
			if s.Env == nil {
				s.Env = map[string]string{}
			}
			s.Env[k] = val
		}
		out = append(out, s)
	}
	return out, nil
}

func resolve(v string, getenv func(string) string) (string, error) {
	switch {
	case strings.HasPrefix(v, "env:"):
		if s := getenv(v[4:]); s != "" {
			return s, nil
		}
		return "", fmt.Errorf("%s is not set", v[4:])
	case strings.HasPrefix(v, "file:"):
		b, err := os.ReadFile(v[5:])
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	return v, nil
}
