package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash/sessionlog"
	"github.com/nats-io/nats.go"
)

// interrupt stops a model call, a tool round or a retry sleep in flight when
// a cancel input for the session is stored, instead of letting it run to
// its end first. It listens to the session's input subjects on core NATS,
// which only hints; the cancel counts once it is on the stream, so the
// turn's answer can name it (and a replay cancels at the same point). The
// same hints spare checkpoints reads that would find nothing.
type interrupt struct {
	d    *drive
	subs []*nats.Subscription // the input subject's and the decision subject's
	// arrivals counts the messages seen on the session's input subjects;
	// read is what it was when the last read of the inputs that succeeded
	// began (-1 before the first). A checkpoint whose answer rides in a
	// record reads only when something arrived since (arrivalsSince, ADR
	// 0017).
	arrivals atomic.Int64
	read     atomic.Int64

	mu     sync.Mutex
	cancel context.CancelCauseFunc // of the effect in flight, if any
	// stopped is set by stop, which ends the confirmations in progress
	// (ctx) and waits for them: they screen inputs against the session's
	// state, which the commit after the turn changes.
	stopped  bool
	ctx      context.Context
	end      context.CancelFunc
	confirms sync.WaitGroup
}

// cancelInput is the cause of an effect stopped by a cancel input.
type cancelInput struct{ seq uint64 }

func (c *cancelInput) Error() string { return fmt.Sprintf("cancelled by input %d", c.seq) }

// watch starts listening; stop ends it. A node that cannot subscribe runs
// the turn without interrupts (cancels still apply at the next checkpoint)
// and without hints (every checkpoint reads).
func (d *drive) watch(st *state) *interrupt {
	i := &interrupt{d: d}
	i.ctx, i.end = context.WithCancel(context.Background())
	i.read.Store(-1)
	channels, err := d.s.n.client.Subjects().SessionInputChannels(d.s.id)
	if err != nil {
		return i
	}
	for _, subj := range channels {
		decisions := subj == channels[1]
		sub, err := d.s.n.nc.Subscribe(subj, func(m *nats.Msg) {
			i.arrivals.Add(1)
			if !decisions {
				return
			}
			var in struct {
				Cancel bool `json:"cancel"`
			}
			if json.Unmarshal(m.Data, &in) == nil && in.Cancel {
				i.mu.Lock()
				if !i.stopped {
					i.confirms.Go(i.confirm)
				}
				i.mu.Unlock()
			}
		})
		if err == nil {
			i.subs = append(i.subs, sub)
		}
	}
	return i
}

func (i *interrupt) stop() {
	for _, sub := range i.subs {
		_ = sub.Unsubscribe()
	}
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	i.end()
	i.confirms.Wait()
}

// arrivalsSince says whether anything may have arrived on the input
// subjects since the last read of them began. Without both subscriptions,
// or before a first read, something may have.
func (i *interrupt) arrivalsSince() bool {
	r := i.read.Load()
	return len(i.subs) != 2 || r < 0 || i.arrivals.Load() != r
}

// begin gives an effect a context that a cancel input ends; done reports
// the answer to record when one did (nil otherwise) and forgets the
// effect.
func (i *interrupt) begin(ctx context.Context) (context.Context, func() *answer) {
	ectx, cancel := context.WithCancelCause(ctx)
	i.mu.Lock()
	i.cancel = cancel
	i.mu.Unlock()
	return ectx, func() *answer {
		i.mu.Lock()
		i.cancel = nil
		i.mu.Unlock()
		var c *cancelInput
		if errors.As(context.Cause(ectx), &c) && ctx.Err() == nil {
			cancel(nil)
			reason := c.Error()
			return &answer{Cancel: &reason, Cursor: c.seq, Inputs: i.consumed(c.seq)}
		}
		cancel(nil)
		return nil
	}
}

// confirm looks for the stored cancel input and stops the effect in
// flight with it. The hint can come before the stream has the input: it
// looks a few times.
func (i *interrupt) confirm() {
	n := i.d.s.n
	for try := range 5 {
		i.mu.Lock()
		inFlight := i.cancel != nil
		i.mu.Unlock()
		if !inFlight {
			return
		}
		ctx, cancel := context.WithTimeout(i.ctx, 5*time.Second)
		seq, err := i.find(ctx)
		cancel()
		if err == nil && seq != 0 {
			i.mu.Lock()
			if i.cancel != nil {
				i.cancel(&cancelInput{seq: seq})
			}
			i.mu.Unlock()
			_ = i.d.s.boundary("interrupted")
			return
		}
		select {
		case <-i.ctx.Done():
			return
		case <-time.After(time.Duration(20<<try) * time.Millisecond):
		}
	}
	n.opts.logger.Debug("a cancel hint found no stored cancel input", "session", i.d.s.id)
}

// find returns the first cancel input after the turn's cursor that the
// session takes (screened as a checkpoint screens it: a refused one
// cancels nothing), or 0.
func (i *interrupt) find(ctx context.Context) (uint64, error) {
	i.d.mu.Lock()
	cursor, taken := i.d.cursor, i.d.inputs
	i.d.mu.Unlock()
	var (
		seq  uint64
		uses []sessionlog.InputUse
	)
	err := i.d.s.n.log.InputsAfter(ctx, i.d.s.id, cursor, func(in sessionlog.Input) error {
		use, parsed, take := screen(i.d.st(), slices.Concat(taken, uses), in, false, i.d.s.n.vouched)
		uses = append(uses, use)
		if take && parsed.Cancel {
			seq = in.Seq
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return seq, err
}

// consumed lists the inputs an interrupt by the cancel at seq consumes:
// those after the turn's cursor up to it. Their keys are kept; their
// messages are dropped with the turn.
func (i *interrupt) consumed(seq uint64) []sessionlog.InputUse {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	i.d.mu.Lock()
	cursor, taken := i.d.cursor, i.d.inputs
	i.d.mu.Unlock()
	var uses []sessionlog.InputUse
	_ = i.d.s.n.log.InputsAfter(ctx, i.d.s.id, cursor, func(in sessionlog.Input) error {
		if in.Seq > seq {
			return errStop
		}
		use, _, _ := screen(i.d.st(), slices.Concat(taken, uses), in, false, i.d.s.n.vouched)
		uses = append(uses, use)
		return nil
	})
	return uses
}
