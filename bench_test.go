package lash

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
)

const answerScript = `
default
  say All good.
`

// memoryTurn runs the same turn with answers kept in a map: the cost of
// the turn without durability.
func memoryTurn(ctx context.Context, model Model, cfg turn.Config, sid, turnID string, journal map[string]turn.Result) error {
	m, err := turn.New(cfg, turn.Start{Session: sid, Turn: turnID, Input: turn.Input{Messages: []turn.Message{{Role: turn.RoleUser, Text: "hi"}}}})
	if err != nil {
		return err
	}
	for {
		e := m.Next()
		var r turn.Result
		switch e := e.(type) {
		case *turn.Progress, *turn.Emit:
			continue
		case *turn.Done:
			return nil
		case *turn.SyncTools:
			r = turn.ToolsSynced{ID: e.H.ID}
		case *turn.LLMCall:
			resp, err := model.Complete(ctx, e.Request, nil)
			if err != nil {
				return err
			}
			r = turn.LLMResult{ID: e.H.ID, Response: &resp}
		case *turn.Checkpoint:
			r = turn.CheckpointResult{ID: e.H.ID}
		default:
			return fmt.Errorf("unexpected %T", e)
		}
		journal[e.Head().Key.String()] = r
		if err := m.Deliver(r); err != nil {
			return err
		}
	}
}

// BenchmarkTurn: a durable turn of three effects (sync tools, model call,
// checkpoint) with the scripted model in-process, against the same turn on
// memory, and turns per second with 1, 16 and 64 sessions at once. It
// reports the messages the node sends to NATS per turn (JetStream round
// trips and publishes).
func BenchmarkTurn(b *testing.B) {
	ctx := context.Background()
	srv := testenv.RunJetStream(b, testenv.WithSyncAlways())
	model := scripted.NewModel(scripted.MustParse(answerScript))
	cfg := turn.Config{Model: "scripted"}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc := srv.Conn(b)
	n, err := Open(ctx, WithConn(nc), WithModel(model), WithMachine(cfg), WithLogger(quiet), WithLeaseTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close(context.Background())

	var memory time.Duration
	b.Run("memory", func(b *testing.B) {
		start := time.Now()
		for i := range b.N {
			if err := memoryTurn(ctx, model, cfg, "mem", fmt.Sprint(i), map[string]turn.Result{}); err != nil {
				b.Fatal(err)
			}
		}
		memory = time.Since(start) / time.Duration(b.N)
	})
	runs := 0 // -count runs the same b.N again: fresh sessions each time
	for _, sessions := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("durable/sessions=%d", sessions), func(b *testing.B) {
			runs++
			before := nc.Stats().OutMsgs
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, sessions)
			per := (b.N + sessions - 1) / sessions
			for s := range sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sess := n.Session(fmt.Sprintf("b%d-%d-%d-%d", sessions, b.N, runs, s))
					for i := range per {
						if _, _, err := sess.Send(ctx, fmt.Sprint(i), Input{Text: "hi"}); err != nil {
							errs <- err
							return
						}
						if _, err := sess.Run(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			turns := per * sessions
			b.ReportMetric(float64(turns)/elapsed.Seconds(), "turns/s")
			b.ReportMetric(float64(nc.Stats().OutMsgs-before)/float64(turns), "nats-msgs/turn")
			if sessions == 1 && memory > 0 {
				b.ReportMetric(float64(elapsed/time.Duration(turns))/float64(memory), "x-memory")
			}
		})
	}
}
