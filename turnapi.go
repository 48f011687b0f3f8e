package lash

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lash-run/lash/live"
	"github.com/nats-io/nats.go"
)

// Turn is one input and the turn that consumes it.
type Turn struct {
	s   *Session
	key string
	in  Input
}

// Turn prepares input for the session; key is its idempotency key.
func (s *Session) Turn(key string, in Input) *Turn { return &Turn{s: s, key: key, in: in} }

// Run sends the input and runs the session until the turn that consumes it
// is committed, and returns that turn. (An input already waiting behind an
// earlier one may be consumed by that turn, at a checkpoint.)
func (t *Turn) Run(ctx context.Context) (*TurnResult, error) { return t.Stream(ctx, nil) }

// Stream is Run, calling live with the turn's live events as they happen.
func (t *Turn) Stream(ctx context.Context, onEvent func(live.Event)) (*TurnResult, error) {
	n := t.s.n
	if onEvent != nil {
		subj, err := n.client.Subjects().Live(t.s.id)
		if err != nil {
			return nil, err
		}
		// A channel subscription: the connection's reader puts each message
		// in msgs as it reads it, so once a Flush returns every event
		// published before it is in msgs, and none is lost at the end. A
		// watcher that falls 4096 events behind loses events (the client's
		// slow-consumer rule), never the turn.
		msgs := make(chan *nats.Msg, 4096)
		sub, err := n.nc.ChanSubscribe(subj, msgs)
		if err != nil {
			return nil, err
		}
		deliver := func(m *nats.Msg) {
			var ev live.Event
			if json.Unmarshal(m.Data, &ev) == nil {
				onEvent(ev)
			}
		}
		done := make(chan struct{})
		delivered := make(chan struct{})
		go func() {
			defer close(delivered)
			for {
				select {
				case m := <-msgs:
					deliver(m)
				case <-done:
					for {
						select {
						case m := <-msgs:
							deliver(m)
						default:
							return
						}
					}
				}
			}
		}()
		defer func() {
			_ = n.nc.Flush()
			_ = sub.Unsubscribe()
			close(done)
			<-delivered
		}()
		if err := n.nc.Flush(); err != nil {
			return nil, err
		}
	}
	seq, _, err := t.s.Send(ctx, t.key, t.in)
	if err != nil {
		return nil, err
	}
	results, err := t.s.Run(ctx)
	if err != nil {
		return nil, err
	}
	for i := range results {
		if results[i].Cursor >= seq {
			return &results[i], nil
		}
	}
	return nil, fmt.Errorf("lash: input %d of session %s was consumed by a turn committed elsewhere", seq, t.s.id)
}
