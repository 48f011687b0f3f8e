package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/anthropic"
	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools/mcptool"
)

// envPrefix starts the environment name of every setting.
const envPrefix = "LASH_"

// apiKeyEnv holds the key of an OpenAI-compatible API. It is read from the
// environment only, so it shows in no process list.
const (
	apiKeyEnv          = "OPENAI_API_KEY"
	anthropicAPIKeyEnv = "ANTHROPIC_API_KEY"
)

// settings are lash-node's settings, from flags, environment and file.
type settings struct {
	config  string
	conn    cli.Conn
	machine cli.Machine
	logging cli.Logging

	data   string
	listen string

	script       string
	baseURL      string
	provider     string
	modelTimeout time.Duration
	stream       bool
	otlpEndpoint string
	// live: the LIVE stream's bounds and storage.
	liveRetention time.Duration
	liveMaxBytes  cli.Size
	liveStorage   string

	nodeID      string
	concurrency int
	leaseTTL    time.Duration
	toolTimeout time.Duration
	toolRefresh time.Duration
	mcpFile     string
	// mcpServers are the servers --mcp-servers lists, read by check.
	mcpServers   []mcptool.Server
	drainTimeout time.Duration
	http         string
	// api: the client API over HTTP (package gateway).
	api apiSettings

	maxInput     cli.Size
	inline       cli.Size
	maxPayload   cli.Size
	turnAttempts int
	// agents bounds each tree of sub-agents: in all, and per session.
	maxAgents, maxAgentsSession int
	// retention and sweepEvery: what the sweeps keep, and how often.
	retention, sweepEvery time.Duration
	secretFile            string
	embeddedAuth          string

	// openaiURL and anthropicURL offer a provider to agents.
	openaiURL, anthropicURL string

	// Read by check: the provider the settings ask for, and those agents
	// run on.
	model     lash.Model
	providers map[string]lash.Model
}

func newFlagSet(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("lash-node", flag.ContinueOnError)
	fs.StringVar(&s.config, "config", "", "settings `file`: one \"name = value\" per line, names as the flags are spelled, # starts a comment")
	s.conn.Register(fs, "`URL` of the NATS servers to join (comma-separated); empty: start the embedded server")
	fs.StringVar(&s.data, "data", "lash-data", "`directory` for the embedded server's JetStream files and the node's session projection (a cache, rebuilt from the streams when deleted)")
	fs.StringVar(&s.listen, "listen", "127.0.0.1:4222", "client `address` of the embedded server, for the nats CLI and other nodes; port 0 picks a free one")
	fs.StringVar(&s.embeddedAuth, "embedded-auth", "auto", "`mode` of the embedded server's authentication: password (user lash, the password in <data>/embedded-password, made on first start), nkey (the user nkey whose seed is <data>/embedded-nkey.seed, made on first start; the seed never crosses the wire), none (refused unless --listen is loopback), auto (none on loopback, password otherwise)")
	s.machine.Register(fs)
	fs.StringVar(&s.script, "script", "", "scripted model: a script `file` (format: provider/scripted), for offline runs")
	fs.StringVar(&s.provider, "provider", "openai", "model `API` of --model: openai (Chat Completions and the servers compatible with it; key from "+apiKeyEnv+") or anthropic (the Messages API; key from "+anthropicAPIKeyEnv+")")
	fs.StringVar(&s.baseURL, "base-url", "", "the provider's API `URL` (default with --model: "+openai.DefaultBaseURL+" for openai, with the /v1 path; "+anthropic.DefaultBaseURL+" for anthropic, without it)")
	fs.StringVar(&s.openaiURL, "openai-url", "", "offer agents whose provider is openai this API `URL` (default when "+apiKeyEnv+" is set: "+openai.DefaultBaseURL+")")
	fs.StringVar(&s.anthropicURL, "anthropic-url", "", "offer agents whose provider is anthropic this API `URL` (default when "+anthropicAPIKeyEnv+" is set: "+anthropic.DefaultBaseURL+")")
	fs.DurationVar(&s.modelTimeout, "model-timeout", 5*time.Minute, "bound on one model call")
	fs.BoolVar(&s.stream, "stream", true, "stream model answers: pieces go out as live text_delta events while the call runs (false: whole answers)")
	fs.DurationVar(&s.liveRetention, "live-retention", streams.DefaultLiveRetention, "how long the LIVE stream keeps live events for watchers that reconnect")
	s.liveMaxBytes = streams.DefaultLiveMaxBytes
	fs.Var(&s.liveMaxBytes, "live-max-bytes", "most `size` the LIVE stream keeps; the oldest events go first")
	fs.StringVar(&s.liveStorage, "live-storage", "memory", "`storage` of the LIVE stream: memory (lost with the server) or file (set when the stream is created)")
	fs.StringVar(&s.nodeID, "node-id", "", "the node's `name` in leases, logs and the node API (default: a fresh id each start)")
	fs.IntVar(&s.concurrency, "concurrency", 16, "`sessions` this node runs at once")
	fs.DurationVar(&s.leaseTTL, "lease-ttl", 15*time.Second, "how long a session lease outlives its last renewal (whole seconds): how soon another node takes over the sessions of a node that vanished")
	fs.DurationVar(&s.toolTimeout, "tool-timeout", time.Minute, "default bound on one tool call")
	fs.DurationVar(&s.toolRefresh, "tool-refresh", 10*time.Second, "how often tools served over NATS (<prefix>.tool.<name>) and by MCP servers are discovered again (at least 100ms)")
	fs.StringVar(&s.mcpFile, "mcp-servers", "", "`file` listing MCP servers whose tools the node offers, as <server>__<tool> (YAML or JSON; README, MCP tools)")
	fs.DurationVar(&s.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM or SIGINT, how long running turns may finish before they are stopped (and finished later by replay)")
	fs.StringVar(&s.otlpEndpoint, "otlp-endpoint", "", "OTLP/HTTP `URL` to export traces to (a span per turn and per effect), e.g. http://localhost:4318; empty: off, unless OTEL_EXPORTER_OTLP_ENDPOINT is set")
	fs.StringVar(&s.http, "http", "127.0.0.1:9464", "`address` serving /healthz and /metrics; off: none")
	s.api.register(fs)
	s.maxInput, s.inline, s.maxPayload = streams.DefaultMaxInputBytes, streams.DefaultInlineBytes, streams.DefaultMaxPayloadBytes
	fs.Var(&s.maxInput, "max-input", "largest input `size`, headers included: the SESSIONS stream refuses larger ones when they are published")
	fs.Var(&s.inline, "inline-max", "largest `size` of a payload (model answer, tool result, commit body) kept inside its message; larger ones go to the object store by reference")
	fs.Var(&s.maxPayload, "max-payload", "largest `size` of a model answer or tool result kept; above it the answer or result is recorded as an error the model sees, never retried; a commit holds at most four")
	fs.IntVar(&s.turnAttempts, "turn-attempts", lash.DefaultTurnAttempts, "`runs` that may begin one turn (each after a failure, with a backoff up to a minute) before it is committed as failed")
	fs.IntVar(&s.maxAgents, "max-agents", processes.DefaultBudget.PerTree, "`sub-agents` that one turn of a top-level session may start, with theirs at any depth; spawn_agent past it is a failed call the model reads")
	fs.IntVar(&s.maxAgentsSession, "max-agents-per-session", processes.DefaultBudget.PerSession, "`sub-agents` that one session of such a tree may start")
	fs.DurationVar(&s.retention, "retention", lifecycle.DefaultRetention, "how long ended work stays for operators to look at (a committed turn's journal, an ended process, a trigger occurrence) before a sweep removes it; work not ended never expires")
	fs.DurationVar(&s.sweepEvery, "sweep-every", lash.DefaultSweepEvery, "how often the deployment is swept of garbage (one node at a time)")
	fs.StringVar(&s.secretFile, "secret-file", "", "`file` holding the deployment's secret (at least 32 bytes), which signs every record nodes and operators write and event keys (tools.AwaitEvent); every node and lash-admin of a deployment needs the same (default: <data>/secret, made on first start)")
	s.logging.Register(fs)
	return fs
}

// aliases are the extra environment names settings read.
func (s *settings) aliases() map[string][]string { return s.conn.Aliases() }

var sections = []cli.Section{
	{Title: "Settings file", Names: []string{"config"}},
	{Title: "NATS (default: an embedded server)", Names: []string{"nats", "creds", "user", "password", "tls-cert", "tls-key", "tls-ca", "prefix", "replicas", "inbox-prefix"}},
	{Title: "Local data and the embedded server", Names: []string{"data", "listen", "embedded-auth"}},
	{Title: "Model provider (give --script, or --model for an OpenAI-compatible API)", Names: []string{"script", "model", "provider", "base-url", "openai-url", "anthropic-url", "model-timeout", "stream"}},
	{Title: "Turns (every node of a deployment must agree)", Names: []string{"system", "max-iterations", "token-budget", "max-tool-failures", "decision-wait", "mode"}},
	{Title: "Node", Names: []string{"node-id", "concurrency", "lease-ttl", "tool-timeout", "tool-refresh", "mcp-servers", "drain-timeout", "turn-attempts", "max-agents", "max-agents-per-session", "retention", "sweep-every", "secret-file"}},
	{Title: "Sizes (the deployment's: every node must agree; set when its streams are created)", Names: []string{"max-input", "inline-max", "max-payload"}},
	{Title: "Live events (the LIVE stream)", Names: []string{"live-retention", "live-max-bytes", "live-storage"}},
	{Title: "Operations", Names: []string{"http", "otlp-endpoint", "log-format", "log-level"}},
	{Title: "Client API over HTTP (README: HTTP API)", Names: apiFlags},
}

const helpHead = `Usage: lash-node [settings]
       lash-node demo

lash-node runs a lash node: it takes session inputs from NATS JetStream and
runs their turns with a model and tools, durably; any number of nodes share
a deployment. With no --nats it starts an embedded NATS server with
JetStream (fsync before acknowledgement) listening on --listen, keeping its
files under --data. Every node serves the node API (a NATS micro service
named "lash", endpoints <prefix>.api.submit, status, decide, cancel, info
and process_start, process_status, process_cancel, process_await, sessions,
transcript), /healthz and /metrics on --http, with --api the client API over
HTTP (sessions, messages, decisions, stops; event streams in lash's, the AI
SDK's and AG-UI's protocols), and offers the built-in tools
(sleep, wait_for_approval, wait_for_signal; process_start, process_await,
process_cancel, process_list, spawn_agent) and every tool served over NATS
under <prefix>.tool.<name>. SIGTERM or SIGINT drains the node and exits 0;
a second signal exits at once with status 1. A node that cannot start, or
whose NATS connection is closed for good (its credentials refused on
reconnect, a protocol error), drains what it can and exits with status 1,
for its supervisor to start it again.

lash-node demo runs a durable turn on an embedded server in a temporary
directory: its worker dies in the middle, a second worker finishes it by
replay. It needs no settings and no network.

Every setting is a flag, an environment variable, or a "name = value" line
in the --config file; a flag beats the environment, which beats the file.
The key of an OpenAI-compatible API is read from ` + apiKeyEnv + `.
An invalid setting prints one line and exits with status 2.

`

func printHelp(w io.Writer, fs *flag.FlagSet, s *settings) {
	fmt.Fprint(w, helpHead)
	cli.Usage(w, fs, envPrefix, s.aliases(), sections)
}

// parseSettings reads the settings; its errors wrap cli.ErrUsage (and
// flag.ErrHelp for --help).
func parseSettings(args []string) (*settings, *flag.FlagSet, error) {
	s := &settings{}
	fs := newFlagSet(s)
	rest, err := cli.Parse(fs, args, envPrefix, s.aliases())
	if err != nil {
		return s, fs, err
	}
	if len(rest) > 0 {
		return s, fs, fmt.Errorf("%w: unexpected argument %q (the only command is demo, given first)", cli.ErrUsage, rest[0])
	}
	return s, fs, s.check()
}

// check validates the settings and reads the model provider they name.
func (s *settings) check() error {
	if err := s.conn.Validate(); err != nil {
		return err
	}
	if err := s.streams().Validate(); err != nil {
		return fmt.Errorf("%w: %v (--max-input, --inline-max, --max-payload)", cli.ErrUsage, err)
	}
	if err := s.logging.Validate(); err != nil {
		return err
	}
	if err := s.checkModel(); err != nil {
		return err
	}
	if s.mcpFile != "" {
		data, err := os.ReadFile(s.mcpFile)
		if err != nil {
			return fmt.Errorf("%w: --mcp-servers: %v", cli.ErrUsage, err)
		}
		if s.mcpServers, err = mcptool.ParseServers(data, os.Getenv); err != nil {
			return fmt.Errorf("%w: --mcp-servers %s: %v", cli.ErrUsage, s.mcpFile, err)
		}
	}
	if err := s.machine.Validate(); err != nil {
		return err
	}
	usage := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{cli.ErrUsage}, args...)...)
	}
	switch {
	case s.data == "":
		return usage("--data cannot be empty")
	case s.concurrency < 1:
		return usage("--concurrency must be at least 1")
	case s.turnAttempts < 1:
		return usage("--turn-attempts must be at least 1")
	case s.maxAgents < 1 || s.maxAgentsSession < 1:
		return usage("--max-agents and --max-agents-per-session must be at least 1")
	case s.retention < time.Second || s.sweepEvery < time.Second:
		return usage("--retention and --sweep-every must be at least 1s")
	case s.leaseTTL < time.Second || s.leaseTTL%time.Second != 0:
		return usage("--lease-ttl must be whole seconds, at least 1s, not %s", s.leaseTTL)
	case s.toolTimeout <= 0:
		return usage("--tool-timeout must be positive")
	case s.liveStorage != "memory" && s.liveStorage != "file":
		return usage("--live-storage %q: give memory or file", s.liveStorage)
	case s.liveRetention < time.Second || s.liveMaxBytes < 1<<20:
		return usage("--live-retention and --live-max-bytes: at least 1s and 1MiB")
	case s.toolRefresh < minToolRefresh:
		return usage("--tool-refresh %s: at least %s (tools served over NATS come and go; a node that stopped looking would never see one come back)", s.toolRefresh, minToolRefresh)
	case s.modelTimeout <= 0:
		return usage("--model-timeout must be positive: a model call with no bound could hold its session for good")
	case s.drainTimeout < 0:
		return usage("--drain-timeout cannot be negative")
	case s.maxInput == 0 || s.inline == 0 || s.maxPayload == 0:
		return usage("--max-input, --inline-max and --max-payload must be positive")
	}
	if s.conn.URL == "" {
		host, _, err := net.SplitHostPort(s.listen)
		if err != nil {
			return usage("--listen %q: want host:port", s.listen)
		}
		switch s.embeddedAuth {
		case "auto", "password", "nkey":
		case "none":
			if !loopback(host) {
				return usage("--listen %s opens the embedded server beyond this host without authentication: use --embedded-auth password (or auto), or a loopback address", s.listen)
			}
		default:
			return usage("--embedded-auth %q: give password, nkey, none or auto", s.embeddedAuth)
		}
	}
	if s.http != "off" {
		if _, _, err := net.SplitHostPort(s.http); err != nil {
			return usage("--http %q: want host:port or off", s.http)
		}
	}
	return s.api.check(usage)
}

// errNoModel says what to give when no provider is named.
var errNoModel = fmt.Errorf("%w: no model provider: give --script FILE for a scripted model, or --model NAME (with --base-url URL and %s) for an OpenAI-compatible API", cli.ErrUsage, apiKeyEnv)

func (s *settings) checkModel() error {
	switch {
	case s.script != "" && s.baseURL != "":
		return fmt.Errorf("%w: give --script or --base-url, not both", cli.ErrUsage)
	case s.script != "":
		text, err := os.ReadFile(s.script)
		if err != nil {
			return fmt.Errorf("%w: --script: %v", cli.ErrUsage, err)
		}
		script, err := scripted.Parse(string(text))
		if err != nil {
			return fmt.Errorf("%w: --script %s: %v", cli.ErrUsage, s.script, err)
		}
		if s.machine.ModelName == "" {
			s.machine.ModelName = "scripted"
		}
		s.model = scripted.NewModel(script)
	case s.provider != "openai" && s.provider != "anthropic":
		return fmt.Errorf("%w: --provider %q: openai or anthropic", cli.ErrUsage, s.provider)
	case s.baseURL == "" && s.machine.ModelName == "":
		return errNoModel
	case s.machine.ModelName == "":
		return fmt.Errorf("%w: --base-url needs --model NAME", cli.ErrUsage)
	case s.provider == "anthropic" && os.Getenv(anthropicAPIKeyEnv) == "" && s.baseURL == "":
		return fmt.Errorf("%w: --provider anthropic needs %s (or --base-url of a server that takes no key)", cli.ErrUsage, anthropicAPIKeyEnv)
	default:
		m, err := s.newProvider(s.provider, s.baseURL, s.machine.ModelName)
		if err != nil {
			return err
		}
		s.model = m
	}
	return s.checkProviders()
}

// checkProviders reads the providers agents run on here: the node's own
// (--provider, not a script), and each one whose URL or key is given.
func (s *settings) checkProviders() error {
	s.providers = map[string]lash.Model{}
	if s.script == "" {
		s.providers[s.provider] = s.model
	}
	for _, p := range []struct{ name, url, keyEnv string }{{"openai", s.openaiURL, apiKeyEnv}, {"anthropic", s.anthropicURL, anthropicAPIKeyEnv}} {
		if p.url == "" && (s.providers[p.name] != nil || os.Getenv(p.keyEnv) == "") {
			continue
		}
		m, err := s.newProvider(p.name, p.url, "")
		if err != nil {
			return err
		}
		s.providers[p.name] = m
	}
	return nil
}

// newProvider is a client of the provider name at url (its default when
// empty), its key from the provider's variable. The provider's own bound
// sits above lash's payload ceiling: an answer over the ceiling is
// recorded as such, not cut off.
func (s *settings) newProvider(name, url, model string) (lash.Model, error) {
	var m lash.Model
	var err error
	if name == "anthropic" {
		m, err = anthropic.New(anthropic.Config{BaseURL: url, APIKey: os.Getenv(anthropicAPIKeyEnv), Model: model,
			Timeout: s.modelTimeout, MaxResponseBytes: 2 * int64(s.maxPayload)})
	} else {
		m, err = openai.New(openai.Config{BaseURL: url, APIKey: os.Getenv(apiKeyEnv), Model: model,
			Timeout: s.modelTimeout, MaxResponseBytes: 2 * int64(s.maxPayload)})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s provider: %v", cli.ErrUsage, name, err)
	}
	return m, nil
}

// streams is the deployment's stream configuration the settings ask for.
func (s *settings) streams() streams.Config {
	c := s.conn.Streams()
	c.MaxInputBytes, c.InlineBytes, c.MaxPayloadBytes = int32(min(int64(s.maxInput), 1<<31-1)), int(s.inline), int64(s.maxPayload)
	c.LiveRetention, c.LiveMaxBytes, c.LiveFile = s.liveRetention, int64(s.liveMaxBytes), s.liveStorage == "file"
	return c
}

// usageLine is how an invalid setting is reported: one line.
func usageLine(err error) string {
	msg := err.Error()
	if errors.Is(err, cli.ErrUsage) {
		msg = fmt.Sprintf("%v (lash-node --help lists the settings)", err)
	}
	return "lash-node: " + msg
}

// loopback reports whether host is only reachable from this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// embeddedPassword says whether the embedded server takes a password.
func (s *settings) embeddedPassword(host string) bool {
	return s.embeddedAuth == "password" || s.embeddedAuth == "auto" && !loopback(host)
}
