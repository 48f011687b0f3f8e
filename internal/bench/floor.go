package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Floor is what raw JetStream operations take on the server, each the
// median of its samples.
type Floor struct {
	// CAS is a publish with a msg id and the subject's expected last
	// sequence: a journal record, a fence, a commit, a lease claim.
	CAS time.Duration
	// Read is a get of a subject's last or next message from the stream's
	// leader: a head, the next input. On one server it is a direct get,
	// as lash's reads of inputs are (ADR 0033).
	Read time.Duration
	// Hop is from a publish until a shared pull consumer delivers the
	// message: how an input reaches a node.
	Hop time.Duration
}

// MeasureFloor times n of each raw operation on a stream of its own, made
// like lash's session stream (file storage, direct gets on one server
// only).
func (e *Env) MeasureFloor(ctx context.Context, n int) (Floor, error) {
	st, err := e.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: e.Replicas, AllowDirect: e.Replicas == 1})
	if err != nil {
		return Floor{}, err
	}
	var f Floor
	cas, err := e.CAS(ctx, n)
	if err != nil {
		return f, err
	}
	reads := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if _, err := st.GetLastMsgForSubject(ctx, "floor.cas"); err != nil {
			return f, fmt.Errorf("floor: read: %w", err)
		}
		reads[i] = time.Since(start)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "floor", FilterSubject: "floor.hop",
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return f, err
	}
	hops := make([]time.Duration, 0, n)
	for range n {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return f, err
		}
		// The pull is waiting on the server before the publish, as a
		// serving node's pull is.
		time.Sleep(time.Millisecond)
		start := time.Now()
		if _, err := e.js.Publish(ctx, "floor.hop", []byte("{}")); err != nil {
			return f, err
		}
		m, ok := <-batch.Messages()
		if !ok {
			return f, fmt.Errorf("floor: hop: no delivery: %v", batch.Error())
		}
		hops = append(hops, time.Since(start))
		_ = m.Ack()
	}
	f.CAS, f.Read, f.Hop = median(cas), median(reads), median(hops)
	return f, nil
}

// CAS times n raw CAS publishes on the floor's stream (MeasureFloor makes
// it). A figure taken over a while takes its CAS samples in between its
// own, so that the disk's drift falls on both alike.
func (e *Env) CAS(ctx context.Context, n int) ([]time.Duration, error) {
	out := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		ack, err := e.js.Publish(ctx, "floor.cas", []byte("0123456789abcdef0123456789abcdef"),
			jetstream.WithMsgID(fmt.Sprintf("cas-%d-%d", time.Now().UnixNano(), i)), jetstream.WithExpectLastSequencePerSubject(e.casLast))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == 10164 {
			// A replicated stream still applying the subject's last
			// write refuses the next one: nothing landed, the sample is
			// dropped and the next goes again a moment later.
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			// A publish the client repeated (a replicated stream's leader
			// changed) may have landed before: take the head and go on. A
			// new leader may need a moment to show it: look a few times.
			head, herr := e.casHead(ctx)
			if herr != nil {
				return nil, fmt.Errorf("floor: CAS publish: %w (head: %v)", err, herr)
			}
			e.casLast = head
			continue
		}
		out[i] = time.Since(start)
		e.casLast = ack.Sequence
	}
	return slices.DeleteFunc(out, func(d time.Duration) bool { return d == 0 }), nil
}

// CASRun is what one CAS publish costs in a run of k one after another:
// the run's time over k. A figure that sums many publishes (a turn's
// records) is compared with this, not with the median of one publish: a
// publish's time is skewed (a few take several times the median), and a
// sum of k of them is k means, not k medians.
func (e *Env) CASRun(ctx context.Context, k int) (time.Duration, error) {
	start := time.Now()
	if _, err := e.CAS(ctx, k); err != nil {
		return 0, err
	}
	return time.Since(start) / time.Duration(k), nil
}

// casHead is the floor subject's last sequence once it is past casLast,
// asked up to ten times, 50 ms apart.
func (e *Env) casHead(ctx context.Context) (uint64, error) {
	st, err := e.js.Stream(ctx, "FLOOR")
	if err != nil {
		return 0, err
	}
	for try := 0; ; try++ {
		head, err := st.GetLastMsgForSubject(ctx, "floor.cas")
		if err == nil && head.Sequence > e.casLast {
			return head.Sequence, nil
		}
		if try == 9 {
			return 0, fmt.Errorf("the subject's head stays at %d: %v", e.casLast, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
