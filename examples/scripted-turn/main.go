// Command scripted-turn runs lash's main job on the embedded default: two
// worker nodes share an in-process NATS server with JetStream; the first
// dies in the middle of a turn, after its tool batch; the second finishes
// the turn by replaying the journal, without calling the model or the
// tools again for the work already recorded.
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
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

const script = `
rule look-up
  when tools = 0
  call weather {"city":"Oslo"}
  call weather {"city":"Lima"}
  call weather {"city":"Pune"}

default
  say Oslo 2C snow; Lima 18C grey; Pune 33C sun.
`

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scripted-turn:", err)
		os.Exit(1)
	}
}

// counts is what the demo proves: how often the model and each tool ran.
type counts struct{ model, tools atomic.Int32 }

type countingModel struct {
	m *scripted.Model
	c *counts
	// die, when set, is called instead of the second inference: the
	// worker dies there.
	die func() error
}

func (cm countingModel) Complete(ctx context.Context, req turn.ModelRequest, onDelta func(string)) (turn.ModelResponse, error) {
	if cm.die != nil && cm.c.model.Load() == 1 {
		return turn.ModelResponse{}, cm.die()
	}
	cm.c.model.Add(1)
	return cm.m.Complete(ctx, req, onDelta)
}

func run(w io.Writer) error {
	ctx := context.Background()
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
	fmt.Fprintln(w, "embedded NATS with JetStream (fsync before ack) in", dir)

	var c counts
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	weather := tools.New()
	tool, _ := tools.Func("weather", "current weather of a city", func(ctx context.Context, a struct {
		City string `json:"city"`
	}) (string, error) {
		c.tools.Add(1)
		return map[string]string{"Oslo": "2C snow", "Lima": "18C grey", "Pune": "33C sun"}[a.City], nil
	})
	weather.Register(tool)
	script := scripted.MustParse(script)

	// Worker one dies as it starts its second inference: its connection
	// drops, and nothing after that reaches the server, not even its
	// lease release.
	conn1, err := srv.Connect()
	if err != nil {
		return err
	}
	dying := countingModel{m: scripted.NewModel(script), c: &c, die: func() error {
		conn1.Close()
		return errors.New("worker died")
	}}
	machine := turn.Config{Model: "scripted", System: "You are a weather agent."}
	node1, err := lash.Open(ctx, lash.WithConn(conn1), lash.WithNodeID("worker-1"), lash.WithModel(dying),
		lash.WithTools(weather), lash.WithMachine(machine), lash.WithLeaseTTL(time.Second), lash.WithLogger(quiet))
	if err != nil {
		return err
	}
	defer node1.Close(ctx)
	session := node1.Session("demo")
	if _, _, err := session.Send(ctx, "question-1", lash.Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nworker-1: running the turn")
	if _, err := session.Run(ctx); err == nil {
		return errors.New("worker-1 should have died")
	}
	fmt.Fprintf(w, "worker-1: died before its second inference (model calls so far %d, tool runs %d)\n", c.model.Load(), c.tools.Load())

	conn2, err := srv.Connect()
	if err != nil {
		return err
	}
	defer conn2.Close()
	node2, err := lash.Open(ctx, lash.WithConn(conn2), lash.WithNodeID("worker-2"),
		lash.WithModel(countingModel{m: scripted.NewModel(script), c: &c}), lash.WithTools(weather), lash.WithMachine(machine), lash.WithLeaseTTL(time.Second), lash.WithLogger(quiet))
	if err != nil {
		return err
	}
	defer node2.Close(ctx)
	fmt.Fprintln(w, "\nworker-2: waiting for worker-1's lease to expire, then replaying")
	var turns []lash.TurnResult
	for {
		turns, err = node2.Session("demo").Run(ctx)
		if !errors.Is(err, lash.ErrBusy) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	if len(turns) != 1 {
		return fmt.Errorf("worker-2 committed %d turns", len(turns))
	}
	t := turns[0]
	fmt.Fprintf(w, "worker-2: committed %s at revision %d: %d effects replayed, %d executed\n",
		t.Turn, t.Seq, t.Replayed, t.Executed)
	fmt.Fprintf(w, "in all: %d model calls, %d tool runs\n", c.model.Load(), c.tools.Load())

	fmt.Fprintln(w, "\njournal of the turn (who recorded each effect):")
	recs, err := effectlog.New(node2.Streams()).Load(ctx, "demo", t.Turn)
	if err != nil {
		return err
	}
	for _, r := range recs {
		who, _, _ := strings.Cut(r.Recorder, "/")
		fmt.Fprintf(w, "  %-38s %s\n", r.Key, who)
	}
	fmt.Fprintf(w, "\noutcome: %s, %d iterations\n", t.Outcome.Termination, t.Outcome.Iterations)
	for _, m := range t.Outcome.Messages {
		line := m.Role.String() + ": " + m.Text
		for _, call := range m.ToolCalls {
			line += fmt.Sprintf(" [%s %s]", call.Name, call.Arguments)
		}
		fmt.Fprintln(w, "  "+strings.TrimSpace(line))
	}
	return nil
}
