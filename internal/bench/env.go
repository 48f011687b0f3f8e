// Package bench measures lash against the JetStream operations it is built
// on, in the same run on the same server: every figure it reports that
// matters is a ratio to such a floor, since absolute times move with the
// machine. `go test -bench` (the module root) and the lash-bench command
// both run it.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Env is an embedded server with JetStream on a fresh directory, or a
// deployment reached through Attach.
type Env struct {
	// Sync says the server fsyncs before it acknowledges (lash's default).
	Sync bool
	// Replicas of the streams the figures use: 1, or 3 on a cluster.
	Replicas int
	dir      string
	srv      *streams.Embedded
	connect  func() (*nats.Conn, error)
	url      string
	nc       *nats.Conn
	js       jetstream.JetStream
	// casLast is the floor subject's last sequence (Env.CAS); rawRuns
	// counts RawTurns runs, which write subjects of their own.
	casLast uint64
	rawRuns int
}

// Start starts a server in a new directory under dir ("" for the system's
// temporary directory).
func Start(dir string, sync bool) (*Env, error) {
	d, err := os.MkdirTemp(dir, "lash-bench-")
	if err != nil {
		return nil, err
	}
	// A loopback listener for clients in other processes (URL); the
	// nodes connect in-process, as lash-node's do to its embedded server.
	srv, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: d, Listen: "127.0.0.1:-1", NoSync: !sync})
	if err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	e := &Env{Sync: sync, Replicas: 1, dir: d, srv: srv, url: srv.ClientURL(), connect: func() (*nats.Conn, error) { return srv.Connect() }}
	if err := e.open(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Attach measures a deployment that runs elsewhere (a cluster, say),
// reached at url; replicas is what its streams get, sync says whether its
// servers fsync before they acknowledge.
func Attach(url string, replicas int, sync bool) (*Env, error) {
	e := &Env{Sync: sync, Replicas: replicas, url: url, connect: func() (*nats.Conn, error) { return nats.Connect(url) }}
	if err := e.open(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) open() error {
	var err error
	if e.nc, err = e.Conn(); err != nil {
		return err
	}
	e.js, err = jetstream.New(e.nc)
	return err
}

// Conn is a new connection to the server.
func (e *Env) Conn() (*nats.Conn, error) { return e.connect() }

// URL is where a client in another process connects: over TCP, where
// Conn may be in-process.
func (e *Env) URL() string { return e.url }

// Close stops the server it started and removes its files.
func (e *Env) Close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		os.RemoveAll(e.dir)
	}
}

// Mode names the fsync mode, and the replicas when more than one.
func (e *Env) Mode() string {
	m := "lazy"
	if e.Sync {
		m = "fsync"
	}
	if e.Replicas > 1 {
		m += fmt.Sprintf(" R%d", e.Replicas)
	}
	return m
}

// appends is how many messages were ever appended to lash's streams (the
// sum of their last sequences): with one server, each is flushed alone.
// Live events are left out: nobody waits for them to be stored, and they
// are kept in memory.
func (e *Env) appends(ctx context.Context) (uint64, error) {
	var sum uint64
	l := e.js.ListStreams(ctx)
	for info := range l.Info() {
		if name := info.Config.Name; strings.Contains(name, "LASH") && !strings.HasSuffix(name, "_LIVE") {
			sum += info.State.LastSeq
		}
	}
	return sum, l.Err()
}

// Quiet is the logger of the nodes a benchmark opens.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// loopScript answers with a tool call while the turn has made fewer than
// "rounds" of them (the user's text), then with text. Its answers give
// their usage, so that the model, a stand-in, does no work in proportion
// to the session's length (counting the tokens of every message): what
// grows with the history is then lash's.
func loopScript(rounds int) string {
	return fmt.Sprintf(`
rule loop
  when user contains rounds
  when tools < %d
  call echo {}
  usage 10 2

default
  say done
  usage 10 1
`, rounds)
}

// node opens a node on its own connection, with an in-process scripted
// model and an echo tool.
func (e *Env) node(id, script string, opts ...lash.Option) (*lash.Node, *nats.Conn, error) {
	nc, err := e.Conn()
	if err != nil {
		return nil, nil, err
	}
	reg := tools.New()
	echo, err := tools.Func("echo", "answers at once", func(ctx context.Context, _ struct{}) (string, error) { return "ok", nil })
	if err != nil {
		return nil, nil, err
	}
	if err := reg.Register(echo); err != nil {
		return nil, nil, err
	}
	base := []lash.Option{lash.WithConn(nc), lash.WithModel(scripted.NewModel(scripted.MustParse(script))), lash.WithTools(reg),
		lash.WithMachine(turn.Config{Model: "scripted"}), lash.WithLogger(Quiet), lash.WithNodeID(id), lash.WithLeaseTTL(5 * time.Second),
		lash.WithStreams(streams.Config{Replicas: e.Replicas})}
	n, err := lash.Open(context.Background(), append(base, opts...)...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return n, nc, nil
}

// Result is one figure.
type Result struct {
	Name  string
	Value float64
	Unit  string
	// Floor is what the same work costs in raw JetStream operations (or
	// the figure it is compared with), in Unit; Ratio is Value/Floor, or
	// where each sample is timed with a floor of its own, the median of
	// the samples' ratios (Note says). For a time below 1 is better, for a
	// rate above 1; Note says which.
	Floor float64
	Ratio float64
	Note  string
}

// Print writes results as a table.
func Print(w io.Writer, rs []Result) {
	for _, r := range rs {
		line := fmt.Sprintf("%-44s %12.3f %-9s", r.Name, r.Value, r.Unit)
		if r.Floor != 0 {
			line += fmt.Sprintf(" floor %10.3f  ratio %6.2fx", r.Floor, r.Ratio)
		}
		if r.Note != "" {
			line += "  " + r.Note
		}
		fmt.Fprintln(w, line)
	}
}

// median of ds.
// median is the middle of xs (the upper one of an even count), 0 for none.
func median[T cmp.Ordered](xs []T) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
