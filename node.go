package lash

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/triggers"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// Model is a model provider: provider/openai's Client and
// provider/scripted's Model both are one. req.Messages shares the turn's
// conversation: a Model reads it and never changes it (a wrapper that
// edits messages copies them first), or the turn's outcome and its replay
// would differ.
type Model interface {
	Complete(ctx context.Context, req turn.ModelRequest, onDelta func(text string)) (turn.ModelResponse, error)
}

// Option configures a Node.
type Option func(*options)

type options struct {
	// noStreaming: ask models for whole answers (WithStreaming(false)).
	noStreaming bool
	providers   map[string]Model
	tracer      trace.Tracer
	conn        *nats.Conn
	storeDir    string
	streams     streams.Config
	model       Model
	tools       *tools.Registry
	machine     turn.Config
	nodeID      string
	leaseTTL    time.Duration
	toolTime    time.Duration
	logger      *slog.Logger
	boundary    func(string) error
	heartbeat   time.Duration
	concurrency int
	stateCache  *int
	stateBytes  int64
	observer    func(Event)
	projection  string
	// turnAttempts and settingsLabel: WithTurnAttempts, WithSettingsLabel.
	turnAttempts  int
	settingsLabel string
	// router adjusts the trigger router's settings (tests).
	router func(*triggers.RouterConfig)
	// secret signs records, event keys and tickets (WithSecret).
	secret []byte
	// agents bounds each tree of sub-agents (WithAgentBudget).
	agents *processes.Budget
	// hold, if set, is called as a signal or a fired timer is taken, before
	// anything is done with it (tests hold work there to kill the node).
	hold func(kind, subject string)
	// leaseStore, if set, wraps the store of the node's leases and
	// liveness (tests make beats fail there).
	leaseStore func(leases.Store) leases.Store
	// inProcessPrograms: WithInProcessPrograms.
	inProcessPrograms bool
}

// WithConn uses an existing NATS connection.
func WithConn(nc *nats.Conn) Option { return func(o *options) { o.conn = nc } }

// WithEmbedded starts an in-process nats-server with JetStream storing its
// files in dir, used when no connection is given.
func WithEmbedded(dir string) Option { return func(o *options) { o.storeDir = dir } }

// WithStreams sets the deployment's prefix and replication, and the
// client's own settings, such as an interceptor of its every call to the
// store (streams.Config.Intercept: tests fail, delay, repeat or cut them).
func WithStreams(c streams.Config) Option { return func(o *options) { o.streams = c } }

// WithModel sets the model provider.
func WithModel(m Model) Option { return func(o *options) { o.model = m } }

// WithTools sets the tools offered to the model.
func WithTools(r *tools.Registry) Option { return func(o *options) { o.tools = r } }

// WithMachine sets the turn machine's configuration: model name, system
// prompt, limits and hooks. Every node of a deployment must use the same.
func WithMachine(c turn.Config) Option { return func(o *options) { o.machine = c } }

// WithNodeID names the node; default: a fresh id.
func WithNodeID(id string) Option { return func(o *options) { o.nodeID = id } }

// WithAgentBudget bounds the sub-agents spawn_agent starts under one turn
// of a top-level session: perTree in all, at any depth, and perSession by
// any one session of the tree. A spawn past either is a failed tool call
// the model reads. Default processes.DefaultBudget (32 and 8).
func WithAgentBudget(perTree, perSession int) Option {
	return func(o *options) { o.agents = &processes.Budget{PerTree: perTree, PerSession: perSession} }
}

// DefaultLeaseTTL is how long a lease lives without renewal unless
// WithLeaseTTL says otherwise.
const DefaultLeaseTTL = 15 * time.Second

// WithLeaseTTL sets how long a session lease lives without renewal
// (whole seconds). Default 15s.
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.leaseTTL = d } }

// WithToolTimeout sets the default per-call tool timeout. Default 1m.
func WithToolTimeout(d time.Duration) Option { return func(o *options) { o.toolTime = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithProjection keeps the deployment's session read model in a Pebble
// store in dir, and its process read model in dir + ".processes", folded
// from the streams while the node runs. They are caches: deleting them
// loses nothing.
func WithProjection(dir string) Option { return func(o *options) { o.projection = dir } }

// WithStreaming says whether model answers are streamed (the default):
// pieces go out as live text_delta events while the call runs. Off, a
// model is asked for whole answers and watchers see each when its call
// ends. The journal records whole answers either way.
func WithStreaming(on bool) Option { return func(o *options) { o.noStreaming = !on } }

// Node runs sessions' turns. Any number of nodes share a deployment.
type Node struct {
	opts     options
	embedded *streams.Embedded
	nc       *nats.Conn
	ownConn  bool
	client   *streams.Client
	log      *sessionlog.Log
	journal  *effectlog.Journal
	leases   *leases.Manager
	runner   *tools.Runner
	programs *programs
	owner    leases.Owner
	runName  string
	proj     *projector.Projector
	projDone chan struct{}
	procProj *projector.Projector
	blobs    *blobs.Store
	procs    *processes.Registry
	// worker is the process worker while RunProcesses runs: the beat
	// tells it when the node's liveness lapses.
	worker atomic.Pointer[processes.Worker]
	// trusted is when the node stops trusting the liveness key its first
	// beat wrote; the beat loop takes it from there.
	trusted time.Time
	// lapsed: the node's liveness lapsed and no beat has landed since.
	lapsed atomic.Bool
	// alive is what session runs go on under: it ends with the node's
	// trust in its liveness key.
	alive  *aliveness
	trigs  *triggers.Triggers
	router *triggers.Router
	// ceiling tells entries a lease could have written (ADR 0027).
	ceiling *ceiling
	// agents caches what picks the tools of sub-agents' sessions.
	agentsMu sync.Mutex
	agents   map[string]*processes.Process
	settings nodeSettings
	// def is the profile of the node's own settings; profiles those of
	// the agent versions it ran.
	def      *profile
	profiles profiles
	// bg ends when the node closes: background loops run under it.
	bg     context.Context
	health health
	states *states
	// gone follows deletion marks: a deleted session's kept state is
	// dropped at once, not when the cache would evict it.
	gone *nats.Subscription
	// snapshots bounds the snapshot writes in flight; Close waits for
	// snapWrites.
	snapshots  chan struct{}
	snapWrites sync.WaitGroup

	mu      sync.Mutex
	running map[string]chan struct{} // sessions this node is driving; closed when the run ends
	// waiting: sessions a dispatch waits on to end their run here.
	waiting map[string]bool
	closing bool
	stop    context.CancelFunc
	beats   sync.WaitGroup
	// runs counts running turns; halt cancels them when draining ends.
	runs sync.WaitGroup
	// wakers counts running Wake loops: Close waits for them before it
	// closes the projection they read.
	wakers sync.WaitGroup
	halt   context.Context
	end    context.CancelFunc
}

// ErrClosed: the node is draining or closed and takes no new work.
var ErrClosed = errors.New("lash: node is closed")

// ErrBusy: the session is being run, by this node or another.
var ErrBusy = errors.New("lash: session is busy")

// Open connects (or starts the embedded server), ensures the deployment
// and starts the node's liveness heartbeat.
func Open(ctx context.Context, opts ...Option) (*Node, error) {
	o := options{leaseTTL: DefaultLeaseTTL, toolTime: time.Minute, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.model == nil {
		return nil, errors.New("lash: a node needs a model (WithModel)")
	}
	if o.tools == nil {
		o.tools = tools.New()
	}
	if o.nodeID == "" {
		o.nodeID = leases.LocalOwner("node").Incarnation
	}
	if o.heartbeat == 0 {
		o.heartbeat = o.leaseTTL / 3
	}
	n := &Node{opts: o, nc: o.conn, running: map[string]chan struct{}{}, waiting: map[string]bool{},
		snapshots: make(chan struct{}, maxSnapshotWrites), states: newStates(DefaultStateCache, DefaultStateBytes),
		alive: newAliveness()}
	if o.stateCache != nil {
		n.states = newStates(*o.stateCache, o.stateBytes)
	}
	n.programs = &programs{inProcess: o.inProcessPrograms}
	n.halt, n.end = context.WithCancel(context.Background())
	if n.nc == nil {
		if o.storeDir == "" {
			return nil, errors.New("lash: give a NATS connection (WithConn) or a data directory (WithEmbedded)")
		}
		e, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: o.storeDir, Listen: "none", Logger: o.logger})
		if err != nil {
			return nil, err
		}
		nc, err := e.Connect()
		if err != nil {
			e.Shutdown()
			return nil, err
		}
		n.embedded, n.nc, n.ownConn = e, nc, true
	}
	c, err := streams.Open(ctx, n.nc, o.streams)
	if err != nil {
		n.closeConn()
		return nil, err
	}
	n.client = c
	if err := sign(ctx, c, o.secret); err != nil {
		n.closeConn()
		return nil, err
	}
	n.ceiling = &ceiling{c: c}
	if err := streams.CheckID(o.nodeID); err != nil {
		n.closeConn()
		return nil, fmt.Errorf("lash: node id: %w", err)
	}
	if n.settings, err = newNodeSettings(SettingsOf(o.machine, o.settingsLabel)); err != nil {
		n.closeConn()
		return nil, err
	}
	// The settings go to the object store once, under their fingerprint:
	// fences, commits and records name them.
	if _, err := c.PutBlob(ctx, n.settings.json); err != nil {
		n.closeConn()
		return nil, fmt.Errorf("lash: storing the turn settings: %w", err)
	}
	n.blobs = newBlobStore(c)
	fp := n.settings.fingerprint[:]
	n.log = sessionlog.New(c, sessionlog.WithBlobs(turnBlobs(n.blobs)), sessionlog.WithSettings(fp))
	n.owner = leases.LocalOwner(o.nodeID)
	n.owner.Settings = n.settings.hex()
	n.owner.Providers, n.owner.Code = providerList(o.providers, ""), code(n.settings.Settings)
	// Journal records and fences name the node and its incarnation, so an
	// operator tells what a restarted node replayed from what it ran.
	n.runName = o.nodeID + "/" + n.owner.Incarnation
	n.journal = effectlog.New(c, effectlog.WithRecorder(n.runName), effectlog.WithBlobs(n.blobs), effectlog.WithSettings(fp))
	if n.def, err = n.newProfile(n.settings, o.model); err != nil {
		n.closeConn()
		return nil, err
	}
	n.profiles = profiles{byVer: map[string]*profile{}, byFP: map[[32]byte]*profile{}, pinned: map[string]*agents.Record{},
		index: agents.NewIndex(agents.New(c, o.nodeID))}
	var ls leases.Store = c
	if o.leaseStore != nil {
		ls = o.leaseStore(c)
	}
	n.leases = leases.New(ls, n.owner)
	n.procs = processes.New(c, o.nodeID)
	n.trigs = triggers.New(c, o.nodeID)
	rc := triggers.RouterConfig{Triggers: n.trigs, Registry: n.procs, Store: c, Logger: o.logger}
	if o.router != nil {
		o.router(&rc)
	}
	n.router = triggers.NewRouter(rc)
	n.runner = tools.NewRunner(o.tools, tools.WithDefaultTimeout(o.toolTime), tools.WithLogger(o.logger))
	beganBeat := time.Now()
	if err := n.leases.Beat(ctx, o.leaseTTL); err != nil {
		n.closeConn()
		return nil, fmt.Errorf("lash: node liveness: %w", err)
	}
	n.trusted = n.leases.TrustedUntil(beganBeat, o.leaseTTL)
	bctx, stop := context.WithCancel(context.Background())
	n.stop, n.bg = stop, bctx
	if o.projection != "" {
		p, err := OpenProjection(o.projection, c)
		if err != nil {
			stop()
			n.closeConn()
			return nil, err
		}
		pp, err := OpenProcessProjection(o.projection+".processes", c)
		if err != nil {
			p.Close()
			stop()
			n.closeConn()
			return nil, err
		}
		n.proj, n.procProj, n.projDone = p, pp, make(chan struct{})
		var folds sync.WaitGroup
		for _, p := range []*projector.Projector{p, pp} {
			folds.Go(func() {
				// The projection is a cache every read of the node leans
				// on: a fold that stops (a lost connection, an object
				// store that does not answer) starts again from its cursor.
				for wait := time.Second; bctx.Err() == nil; wait = min(2*wait, 30*time.Second) {
					err := p.Run(bctx)
					if bctx.Err() != nil {
						return
					}
					o.logger.Error("projection stopped; it starts again", "err", err, "in", wait)
					select {
					case <-bctx.Done():
					case <-time.After(wait):
					}
				}
			})
		}
		go func() { folds.Wait(); close(n.projDone) }()
	}
	if n.gone, err = n.nc.Subscribe(c.Subjects().AllSessionMarks(), func(m *nats.Msg) {
		if sid, err := c.Subjects().SessionOf(m.Subject); err == nil {
			// The marker first: a state gone says the session is.
			if key, err := leases.Key("sess", sid); err == nil {
				n.leases.Forget(key)
			}
			n.states.take(sid)
		}
	}); err != nil {
		stop()
		n.closeConn()
		return nil, fmt.Errorf("lash: following deletions: %w", err)
	}
	n.alive.trust(n.trusted)
	n.beats.Add(1)
	go n.beat(bctx)
	return n, nil
}

// beat keeps the node's liveness key. The node trusts its key for the
// TTL less a margin after the start of the last beat that landed, by its
// own clock; past that, or when a beat that landed found the key gone,
// other nodes may have taken it for dead and its background work over,
// and the process worker stops what it runs (processes.Worker.Lapsed).
// Session runs stop too, at that moment and not at the next beat
// (aliveness): their own leases do not keep them, since a claimant takes
// the lease of a node it finds dead at once.
func (n *Node) beat(ctx context.Context) {
	defer n.beats.Done()
	t := time.NewTicker(n.opts.heartbeat)
	defer t.Stop()
	trusted := n.trusted
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A beat cannot land after the key is no longer trusted: a
			// call still out then counts as failed.
			lapsed := n.lapsed.Load() // this loop alone writes it
			bctx, cancel := ctx, context.CancelFunc(func() {})
			if !lapsed {
				bctx, cancel = context.WithDeadline(ctx, trusted)
			}
			start := time.Now()
			gone, err := n.leases.Heartbeat(bctx, n.opts.leaseTTL)
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				trusted = n.leases.TrustedUntil(start, n.opts.leaseTTL)
				if gone && !lapsed {
					n.opts.logger.Warn("the node's liveness key had lapsed; its background attempts stop, as other nodes may have taken them",
						"node", n.opts.nodeID)
					n.livenessLapsed()
				}
				n.alive.trust(trusted)
				if gone || lapsed {
					n.opts.logger.Info("the node's liveness is back", "node", n.opts.nodeID)
				}
				// Told at every beat, not only when the lapse ends: a worker
				// that began meanwhile may have been told of the lapse late.
				n.lapsed.Store(false)
				if w := n.worker.Load(); w != nil {
					w.Alive()
				}
			default:
				n.opts.logger.Warn("node liveness beat failed", "node", n.opts.nodeID, "err", err)
				if !lapsed && !time.Now().Before(trusted) {
					n.opts.logger.Warn("no liveness beat landed while the node could trust its key; its background attempts stop until one does",
						"node", n.opts.nodeID)
					lapsed = true
				}
				if lapsed {
					n.livenessLapsed()
				}
			}
			// The LIVE stream is in memory: a server's restart loses it.
			if made, err := n.client.EnsureLive(ctx); err != nil && ctx.Err() == nil {
				n.opts.logger.Warn("checking the LIVE stream", "err", err)
			} else if made {
				n.opts.logger.Info("the LIVE stream was missing (its server restarted); made it again")
			}
		}
	}
}

// livenessLapsed stops the background attempts and session runs this node
// runs: other nodes may take them over now.
func (n *Node) livenessLapsed() {
	n.lapsed.Store(true)
	n.alive.lapse()
	if w := n.worker.Load(); w != nil {
		w.Lapsed()
	}
}

// Projection is the node's session read model, or nil without
// WithProjection. Read your own writes with its WaitFor.
func (n *Node) Projection() *projector.Projector { return n.proj }

// ProcessProjection is the node's process read model (kept beside the
// session read model, in its directory with ".processes" added), or nil
// without WithProjection.
func (n *Node) ProcessProjection() *projector.Projector { return n.procProj }

// Running counts the sessions this node is running now.
func (n *Node) Running() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.running)
}

// ID is the node's name.
func (n *Node) ID() string { return n.opts.nodeID }

// ToolNames are the tools the node offers its turns now, by name.
func (n *Node) ToolNames() []string {
	specs := n.opts.tools.Specs()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names
}

// Owner is the node's identity as lease holder.
func (n *Node) Owner() leases.Owner { return n.owner }

// Streams is the node's JetStream client.
func (n *Node) Streams() *streams.Client { return n.client }

// Close drains the node: it takes no new work, lets running turns finish
// until ctx ends, then stops the rest, which release their leases; what
// they recorded is finished by replay on another node. It returns ctx's
// error if it had to stop turns.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return nil
	}
	n.closing = true
	n.mu.Unlock()
	drained := make(chan struct{})
	go func() { n.runs.Wait(); close(drained) }()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
		n.end()
		<-drained
	}
	n.end()
	n.snapWrites.Wait()
	n.wakers.Wait()
	n.programs.sandbox.Close()
	_ = n.gone.Unsubscribe()
	n.stop()
	n.beats.Wait()
	n.alive.stop()
	if n.proj != nil {
		<-n.projDone
		if cerr := n.proj.Close(); cerr != nil && err == nil {
			err = cerr
		}
		if cerr := n.procProj.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	n.closeConn()
	return err
}

func (n *Node) closeConn() {
	if n.ownConn {
		n.nc.Close()
	}
	if n.embedded != nil {
		n.embedded.Shutdown()
	}
}

// callError maps a provider failure to the machine's CallError.
func callError(err error) *turn.CallError { return provider.CallError(err) }

// newBlobStore is the deployment's store of payloads by reference.
func newBlobStore(c *streams.Client) *blobs.Store {
	cfg := c.Config()
	return blobs.New(c, blobs.Limits{Inline: cfg.InlineBytes, Max: cfg.MaxPayloadBytes})
}

// TurnPayloads is how many payload ceilings one commit body may hold: a
// turn gathers several answers and results.
const TurnPayloads = 4

// turnBlobs is the store of commit bodies: their ceiling is TurnPayloads
// payload ceilings.
func turnBlobs(b *blobs.Store) *blobs.Store { return b.WithMax(TurnPayloads * b.Limits().Max) }

func (n *Node) turnAttempts() int {
	if n.opts.turnAttempts > 0 {
		return n.opts.turnAttempts
	}
	return DefaultTurnAttempts
}

// sign makes c sign and check records with the deployment's secret. A node
// without one refuses a deployment whose records are signed: what it
// wrote would be set aside by every other node.
func sign(ctx context.Context, c *streams.Client, secret []byte) error {
	if len(secret) > 0 {
		if err := c.Sign(ctx, secret); err != nil {
			return fmt.Errorf("lash: %w", err)
		}
		return nil
	}
	signed, err := c.Signed(ctx)
	if err != nil {
		return fmt.Errorf("lash: reading the deployment's signing stamp: %w", err)
	}
	if signed {
		return fmt.Errorf("lash: %w: this deployment signs its records and this node has no secret (WithSecret, lash-node --secret-file)", streams.ErrSecretMismatch)
	}
	return nil
}
