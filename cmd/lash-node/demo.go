package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// demoScript is the demo's model: look up three cities, then answer.
const demoScript = `
rule look-up
  when tools = 0
  call weather {"city":"Oslo"}
  call weather {"city":"Lima"}
  call weather {"city":"Pune"}

default
  say Oslo 2C snow; Lima 18C grey; Pune 33C sun.
`

const (
	demoSession  = "demo"
	demoQuestion = "Weather in Oslo, Lima and Pune?"
	demoLeaseTTL = time.Second
)

// demoWorker counts what one worker did.
type demoWorker struct {
	name   string
	model  atomic.Int32
	tools  atomic.Int32
	script *scripted.Script
	// die, when set, is called instead of the worker's second model call.
	die func() error
}

func (w *demoWorker) Complete(ctx context.Context, req turn.ModelRequest, onDelta func(string)) (turn.ModelResponse, error) {
	if w.die != nil && w.model.Load() == 1 {
		return turn.ModelResponse{}, w.die()
	}
	w.model.Add(1)
	return scripted.NewModel(w.script).Complete(ctx, req, onDelta)
}

func (w *demoWorker) registry() *tools.Registry {
	reg := tools.New()
	tool, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a struct {
		City string `json:"city"`
	}) (string, error) {
		w.tools.Add(1)
		return map[string]string{"Oslo": "2C snow", "Lima": "18C grey", "Pune": "33C sun"}[a.City], nil
	})
	if err != nil {
		panic(err) // a fixed signature: cannot fail
	}
	if err := reg.Register(tool); err != nil {
		panic(err)
	}
	return reg
}

func (w *demoWorker) open(ctx context.Context, nc *nats.Conn) (*lash.Node, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return lash.Open(ctx, lash.WithConn(nc), lash.WithNodeID(w.name), lash.WithModel(w), lash.WithTools(w.registry()),
		lash.WithMachine(turn.Config{Model: "scripted", System: "You are a weather agent."}),
		lash.WithLeaseTTL(demoLeaseTTL), lash.WithLogger(quiet))
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprintln(stdout, "Usage: lash-node demo\n\nRuns a durable turn on an embedded NATS server in a temporary directory:\nits worker dies in the middle, a second worker finishes it by replay.")
			return exitOK
		}
		fmt.Fprintf(stderr, "lash-node: invalid setting: demo takes no arguments, not %q\n", args[0])
		return exitUsage
	}
	if err := demo(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "lash-node demo:", err)
		return exitFail
	}
	return exitOK
}

// demo is lash's main job told for an operator: a turn whose worker
// dies in the middle is finished by another worker from the journal.
func demo(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "lash-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: dir, Listen: "none"})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	script := scripted.MustParse(demoScript)

	fmt.Fprintln(w, "lash-node demo: a durable turn outlives the worker running it")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  NATS     embedded, JetStream files in %s, fsync before every acknowledgement\n", dir)
	fmt.Fprintf(w, "  workers  worker-1 and worker-2, each a lash node; a session lease lasts %s unless renewed\n", demoLeaseTTL)
	fmt.Fprintln(w, "  model    scripted: ask for the weather of three cities, then answer")
	fmt.Fprintln(w)

	// Worker one dies at its second model call: its connection drops, and
	// nothing after that reaches the server, not even its lease release.
	conn1, err := srv.Connect()
	if err != nil {
		return err
	}
	one := &demoWorker{name: "worker-1", script: script, die: func() error {
		conn1.Close()
		return errors.New("worker died")
	}}
	node1, err := one.open(ctx, conn1)
	if err != nil {
		return err
	}
	defer node1.Close(context.Background())
	s1 := node1.Session(demoSession)
	seq, _, err := s1.Send(ctx, "question-1", lash.Input{Text: demoQuestion})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "user      %s   (input %d on session %q)\n\n", demoQuestion, seq, demoSession)
	fmt.Fprintln(w, "worker-1  takes the session's lease and runs the turn")
	if _, err := s1.Run(ctx); err == nil {
		return errors.New("worker-1 should have died")
	}
	fmt.Fprintf(w, "worker-1  made %d model call and %d tool runs; each outcome went to the journal as it came\n", one.model.Load(), one.tools.Load())
	fmt.Fprintln(w, "worker-1  *** DIES *** at its second model call: connection gone, lease never released, nothing committed")
	fmt.Fprintln(w)

	conn2, err := srv.Connect()
	if err != nil {
		return err
	}
	defer conn2.Close()
	two := &demoWorker{name: "worker-2", script: script}
	node2, err := two.open(ctx, conn2)
	if err != nil {
		return err
	}
	defer node2.Close(context.Background())
	fmt.Fprintln(w, "worker-2  finds the session's lease held; waits for it to expire, then takes it over")
	var turns []lash.TurnResult
	waited := time.Now()
	for {
		turns, err = node2.Session(demoSession).Run(ctx)
		if !errors.Is(err, lash.ErrBusy) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	if len(turns) != 1 {
		return fmt.Errorf("worker-2 committed %d turns", len(turns))
	}
	t := turns[0]
	fmt.Fprintf(w, "worker-2  took the lease after %s; REPLAYED %d effects from the journal, EXECUTED %d\n",
		time.Since(waited).Round(100*time.Millisecond), t.Replayed, t.Executed)
	fmt.Fprintf(w, "worker-2  committed turn %s at revision %d: %s\n\n", t.Turn, t.Seq, t.Outcome.Termination)

	journal, err := lash.NewInspector(node2.Streams()).Journal(ctx, demoSession, t.Turn)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "journal of turn %s, in the order recorded:\n", t.Turn)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  effect\trecorded by\tworker-2\ttook\toutcome")
	for _, e := range journal {
		what := "EXECUTED"
		if e.Replayed {
			what = "replayed"
		}
		name := fmt.Sprintf("%s %d", e.Kind, e.Key.Effect)
		if e.Call != "" {
			name += " " + e.Call
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, e.Recorder, what, e.Took.Round(time.Microsecond), e.Summary)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nin all: %d model calls (worker-1 %d, worker-2 %d) and %d tool runs (worker-1 %d, worker-2 %d):\n",
		one.model.Load()+two.model.Load(), one.model.Load(), two.model.Load(),
		one.tools.Load()+two.tools.Load(), one.tools.Load(), two.tools.Load())
	fmt.Fprintln(w, "nothing worker-1 recorded was done again.")
	fmt.Fprintln(w)

	msgs, err := node2.Session(demoSession).Transcript(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "transcript of session %q:\n", demoSession)
	for _, m := range msgs {
		text := m.Text
		var calls []string
		for _, c := range m.ToolCalls {
			calls = append(calls, c.Name+" "+c.Arguments)
		}
		if len(calls) > 0 {
			text = strings.TrimSpace(text + " calls " + strings.Join(calls, ", "))
		}
		fmt.Fprintf(w, "  %-9s  %s\n", m.Role, text)
	}
	return nil
}
