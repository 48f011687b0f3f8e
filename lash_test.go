package lash

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

const weatherScript = `
rule lookup
  when tools = 0
  call weather {"city":"Oslo"}
  call weather {"city":"Lima"}
  call weather {"city":"Pune"}
  usage 40 30

default
  say Oslo is cold, Lima is grey, Pune is hot.
  usage 90 12
`

type weatherArgs struct {
	City string `json:"city"`
}

// counter counts tool runs per city.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) registry(t testing.TB) *tools.Registry {
	reg := tools.New()
	tool, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a weatherArgs) (string, error) {
		c.mu.Lock()
		c.runs[a.City]++
		c.mu.Unlock()
		return map[string]string{"Oslo": "2C snow", "Lima": "18C grey", "Pune": "33C sun"}[a.City], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	return reg
}

type rig struct {
	t        *testing.T
	ctx      context.Context
	conn     func() *nats.Conn
	replicas int
	models   *testenv.ModelServer
	runs     *counter
}

func newRig(t *testing.T) *rig {
	srv := testenv.RunJetStream(t)
	return &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return srv.Conn(t) }, replicas: 1,
		models: testenv.RunModelServer(t, scripted.MustParse(weatherScript)), runs: &counter{runs: map[string]int{}}}
}

// newClusterRig runs the deployment with R3 streams on a 3-node cluster.
func newClusterRig(t *testing.T) *rig {
	c := testenv.RunCluster(t, 3)
	return &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return c.Conn(t) }, replicas: 3,
		models: testenv.RunModelServer(t, scripted.MustParse(weatherScript)), runs: &counter{runs: map[string]int{}}}
}

func (r *rig) node(id string, extra ...Option) *Node { return r.nodeOn(r.conn(), id, extra...) }

func (r *rig) nodeOn(nc *nats.Conn, id string, extra ...Option) *Node {
	r.t.Helper()
	client, err := openai.New(openai.Config{BaseURL: r.models.URL(), Model: "scripted", Timeout: 10 * time.Second})
	if err != nil {
		r.t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := append([]Option{WithConn(nc), WithStreams(streams.Config{Replicas: r.replicas}), WithLogger(quiet), WithModel(client), WithTools(r.runs.registry(r.t)), WithNodeID(id),
		WithMachine(turn.Config{Model: "scripted", System: "You are a weather agent."}), WithLeaseTTL(time.Second)}, extra...)
	n, err := Open(r.ctx, opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// model, then three parallel tools, then model, then answer.
func TestTurnEndToEnd(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("results %+v", res)
	}
	out := res[0].Outcome
	var lines []string
	for _, m := range out.Messages {
		lines = append(lines, fmt.Sprintf("%s:%s:%d:%s", m.Role, m.Text, len(m.ToolCalls), m.CallID))
	}
	want := []string{
		"user:Weather in Oslo, Lima and Pune?:0:",
		"assistant::3:",
		"tool:2C snow:0:call_1", "tool:18C grey:0:call_2", "tool:33C sun:0:call_3",
		"assistant:Oslo is cold, Lima is grey, Pune is hot.:0:",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("transcript:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if out.Usage != (turn.Usage{InputTokens: 130, OutputTokens: 42}) {
		t.Fatalf("usage %+v", out.Usage)
	}
	if r.models.Requests() != 2 || r.runs.runs["Oslo"] != 1 || r.runs.runs["Pune"] != 1 {
		t.Fatalf("model requests %d, tool runs %v", r.models.Requests(), r.runs.runs)
	}
	// Nothing is left to run; the transcript reads back from the log.
	if more, err := s.Run(r.ctx); err != nil || len(more) != 0 {
		t.Fatalf("second run: %v %v", more, err)
	}
	tr, err := s.Transcript(r.ctx)
	if err != nil || len(tr) != 6 {
		t.Fatalf("transcript %d, %v", len(tr), err)
	}
	// The projection agrees.
	p, err := projector.Open(t.TempDir(), n.Streams(), projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>",
		Folds: []projector.Fold{projector.NewSessions("lash")}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.CatchUp(r.ctx); err != nil {
		t.Fatal(err)
	}
	h, err := p.Session("s1")
	if err != nil || h.Turns != 1 || h.Messages != 6 || h.Usage != out.Usage || h.PendingInputs != 0 || h.Status != turn.StatusDone {
		t.Fatalf("projection head %+v, %v", h, err)
	}
}

var errCrash = errors.New("crash")

// A node that dies at any boundary of the turn leaves it to another, which
// finishes it by replay: one commit, each recorded model request and tool
// run done once, the same transcript as without the crash.
func TestCrashAtEveryBoundary(t *testing.T) { crashMatrix(t, newRig, threeCalls) }

// The same for a round of one call, whose checkpoints are answered in the
// records before them.
func TestCrashAtEveryBoundaryOneCall(t *testing.T) { crashMatrix(t, newRig, oneCall) }

// matrix is a turn the crash matrix runs: a script, the input, and the
// effects whose boundaries it crashes at.
type matrix struct {
	script, text string
	at           []string
	// opts are the nodes' options; calls names the city each tool call
	// (by its key's call) asks for, when not the three calls'.
	opts  []Option
	calls map[string]string
}

var (
	// "model, three parallel tools, model, answer": effects 1 sync-tools,
	// 2 llm-call, 3 the tool batch, 4 checkpoint, 5 llm-call, 6 checkpoint
	// (answered in the record of 5).
	threeCalls = matrix{weatherScript, "Weather in Oslo, Lima and Pune?",
		[]string{"sync-tools 1", "llm-call 2", "tool call_1", "tool call_2", "tool call_3", "checkpoint 4", "llm-call 5"}, nil, nil}
	// The same with one call: 4 is answered in the call's record.
	oneCall = matrix{injectScript, "Weather in Oslo?", []string{"sync-tools 1", "llm-call 2", "tool call_1", "llm-call 5"}, nil, nil}
)

// The same on a 3-node cluster with R3 streams.
func TestCrashAtEveryBoundaryCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster crash matrix")
	}
	testenv.SkipClusterUnderRace(t)
	crashMatrix(t, newClusterRig, threeCalls)
}

func crashMatrix(t *testing.T, newRig func(*testing.T) *rig, m matrix) {
	boundaries := []string{"lease", "fence"}
	for _, at := range m.at {
		boundaries = append(boundaries, "before-record "+at, "after-record "+at)
	}
	boundaries = append(boundaries, "before-commit", "after-commit", "after-release")
	for _, b := range boundaries {
		t.Run(strings.ReplaceAll(b, " ", "_"), func(t *testing.T) {
			r := newRig(t)
			r.models = testenv.RunModelServer(t, scripted.MustParse(m.script))
			var once sync.Once
			crashed := false
			conn := r.conn()
			// The crash: the connection drops and the driver stops there;
			// nothing after the boundary reaches the server, not even the
			// lease release, so the second node waits out the TTL.
			first := r.nodeOn(conn, "first", append(slices.Clip(m.opts), withBoundary(func(name string) error {
				if name == b {
					hit := false
					once.Do(func() { hit = true })
					if hit {
						crashed = true
						conn.Close()
						return errCrash
					}
				}
				return nil
			}))...)
			s := first.Session("s1")
			if _, _, err := s.Send(r.ctx, "k1", Input{Text: m.text}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Run(r.ctx); err == nil || !crashed {
				t.Fatalf("first node: %v, crashed %v", err, crashed)
			}
			// The first node is gone: its connection and liveness too.
			first.Close(context.Background())
			second := r.node("second", m.opts...)
			runUntilFree(t, second.Session("s1"))
			tr, err := second.Session("s1").Transcript(r.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := describeTranscript(tr), describeTranscript(crashFreeTranscript(t, m)); got != want {
				t.Fatalf("transcript after the crash:\n%s\nwithout a crash:\n%s", got, want)
			}
			// One commit: the log holds exactly one commit of the turn.
			st, err := second.Session("s1").load(r.ctx)
			if err != nil || st.turns != 1 {
				t.Fatalf("commits %v, %v", st.turns, err)
			}
			for _, h := range r.models.Seen() {
				if c := r.models.Count(h.Hash); c != 1 {
					t.Errorf("model request %s made %d times", h.Summary, c)
				}
			}
			// A tool whose outcome the first node recorded ran once; one it
			// ran without recording (the crash came first) may run again.
			recs, err := second.journal.Load(r.ctx, "s1", "in-1")
			if err != nil {
				t.Fatal(err)
			}
			city := map[string]string{"call_1": "Oslo", "call_2": "Lima", "call_3": "Pune"}
			if m.calls != nil {
				city = m.calls
			}
			for _, rec := range recs {
				if rec.Key.Kind != turn.KindToolCall && rec.Key.Kind != turn.KindProgramCall || city[rec.Key.Call] == "" {
					continue
				}
				runs := r.runs.runs[city[rec.Key.Call]]
				if strings.HasPrefix(rec.Recorder, "first/") && runs != 1 || runs < 1 || runs > 2 {
					t.Errorf("tool %s (recorded by %s) ran %d times", rec.Key.Call, rec.Recorder, runs)
				}
			}
		})
	}
}

// crashFreeTranscript is the transcript of the same turn run without a crash.
func crashFreeTranscript(t *testing.T, m matrix) []turn.Message {
	t.Helper()
	crashFree.mu.Lock()
	defer crashFree.mu.Unlock()
	if msgs, ok := crashFree.messages[m.script]; ok {
		return msgs
	}
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(m.script))
	s := r.node("clean", m.opts...).Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: m.text}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err := s.Transcript(r.ctx)
	if err != nil || len(msgs) == 0 {
		t.Fatalf("the crash-free run: %d messages, %v", len(msgs), err)
	}
	if crashFree.messages == nil {
		crashFree.messages = map[string][]turn.Message{}
	}
	crashFree.messages[m.script] = msgs
	return msgs
}

var crashFree struct {
	mu       sync.Mutex
	messages map[string][]turn.Message
}

func describeTranscript(msgs []turn.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s %q %s %v", m.Role, m.Text, m.CallID, m.Error)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, " [%s %s %s]", c.ID, c.Name, c.Arguments)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// runUntilFree runs a session until it is no longer busy elsewhere (a dead
// node's lease expires) and a run succeeds, and returns the turns committed.
func runUntilFree(t *testing.T, s *Session) []TurnResult {
	t.Helper()
	var res []TurnResult
	testenv.WaitFor(t, 20*time.Second, func() error {
		more, err := s.Run(context.Background())
		res = append(res, more...)
		return err
	})
	return res
}

// caughtUp opens a read model (OpenProjection, OpenSignalProjection) of the
// deployment c belongs to in a fresh directory, folded through everything
// stored now; the test's cleanup closes it.
func caughtUp(t *testing.T, open func(string, *streams.Client) (*projector.Projector, error), c *streams.Client) *projector.Projector {
	t.Helper()
	p, err := open(t.TempDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}
