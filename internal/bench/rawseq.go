package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// rawSeq does, one after another with nothing in between, the round trips
// a turn makes, as lash makes them, on streams made like lash's: for the
// smallest turn until its commit (the list above turnWrites), the input's
// publish and its delivery by a shared pull consumer, the lease claim (a
// CAS on a key-value bucket), the next input read (a direct get per input
// subject, both sent at once, on one server), the fence and the commit
// (CAS on a log subject), the two records (expected sequence 0 on a
// journal stream) and the checkpoint's read; for a tool round, its two
// records and the read between them. An operation timed alone over and
// over (Floor) need not cost what it does between others on other
// streams: these say how much of a ratio to Floor the round trips
// themselves take, with nothing of lash in between.
type rawSeq struct {
	e          *Env
	sess       jetstream.Stream
	kv         jetstream.KeyValue
	cons       jetstream.Consumer
	lease, log uint64
	input      uint64
	n          int
	payload    []byte
	// run names this sequence's subjects (an Env may make several).
	run string
}

func (e *Env) newRawSeq(ctx context.Context) (*rawSeq, error) {
	sess, err := e.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "SEQSESS", Subjects: []string{"seqsess.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: e.Replicas, AllowDirect: e.Replicas == 1})
	if err != nil {
		return nil, err
	}
	_, err = e.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "SEQFX", Subjects: []string{"seqfx.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: e.Replicas})
	if err != nil {
		return nil, err
	}
	kv, err := e.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "SEQKV", Replicas: e.Replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, err
	}
	e.rawRuns++
	run := fmt.Sprint(e.rawRuns)
	cons, err := sess.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "seq-" + run, FilterSubject: "seqsess." + run + ".in",
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, err
	}
	return &rawSeq{e: e, sess: sess, kv: kv, cons: cons, payload: make([]byte, 300), run: run}, nil
}

// turn times one sequence.
func (r *rawSeq) turn(ctx context.Context) (time.Duration, error) {
	r.n++
	batch, err := r.cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		return 0, err
	}
	// The pull is waiting on the server before the publish, as a serving
	// node's pull is.
	time.Sleep(time.Millisecond)
	start := time.Now()
	ack, err := r.e.js.Publish(ctx, r.subj("seqsess", "in"), r.payload, jetstream.WithMsgID(fmt.Sprintf("seq-%s-in-%d", r.run, r.n)))
	if err != nil {
		return 0, err
	}
	m, ok := <-batch.Messages()
	if !ok {
		return 0, fmt.Errorf("raw sequence: no delivery: %v", batch.Error())
	}
	if r.lease == 0 {
		r.lease, err = r.kv.Create(ctx, "lease-"+r.run, r.payload[:40])
	} else {
		r.lease, err = r.kv.Update(ctx, "lease-"+r.run, r.payload[:40], r.lease)
	}
	if err != nil {
		return 0, err
	}
	if err := r.read(ctx); err != nil {
		return 0, err
	}
	r.input = ack.Sequence
	cas := func(subj string, last uint64, kind string) (uint64, error) { return r.cas(ctx, subj, last, kind) }
	if r.log, err = cas(r.subj("seqsess", "ev"), r.log, "fence"); err != nil {
		return 0, err
	}
	if _, err := cas(r.subj("seqfx", r.n, "sync"), 0, "sync"); err != nil {
		return 0, err
	}
	if err := r.read(ctx); err != nil && !isNotFound(err) {
		return 0, err
	}
	if _, err := cas(r.subj("seqfx", r.n, "model"), 0, "model"); err != nil {
		return 0, err
	}
	if r.log, err = cas(r.subj("seqsess", "ev"), r.log, "commit"); err != nil {
		return 0, err
	}
	took := time.Since(start)
	_ = m.Ack()
	return took, nil
}

// round times what a tool round of one call makes, one after another:
// the model answer's record, the checkpoint's read, the call's record.
func (r *rawSeq) round(ctx context.Context) (time.Duration, error) {
	r.n++
	start := time.Now()
	if _, err := r.cas(ctx, r.subj("seqfx", r.n, "model"), 0, "model"); err != nil {
		return 0, err
	}
	if err := r.read(ctx); err != nil && !isNotFound(err) {
		return 0, err
	}
	if _, err := r.cas(ctx, r.subj("seqfx", r.n, "call"), 0, "call"); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// read is a next input read: a direct get per input subject, sent at once.
func (r *rawSeq) read(ctx context.Context) error {
	other := make(chan error, 1)
	go func() {
		_, err := r.sess.GetMsg(ctx, r.input+1, jetstream.WithGetMsgSubject(r.subj("seqsess", "decide")))
		other <- err
	}()
	_, err := r.sess.GetMsg(ctx, r.input+1, jetstream.WithGetMsgSubject(r.subj("seqsess", "in")))
	if oerr := <-other; oerr != nil && !isNotFound(oerr) {
		return oerr
	}
	return err
}

func (r *rawSeq) cas(ctx context.Context, subj string, last uint64, kind string) (uint64, error) {
	a, err := r.e.js.Publish(ctx, subj, r.payload, jetstream.WithMsgID(fmt.Sprintf("seq-%s-%s-%d", r.run, kind, r.n)),
		jetstream.WithExpectLastSequencePerSubject(last))
	if err != nil {
		return 0, err
	}
	return a.Sequence, nil
}

// subj is stream's subject of this sequence with the tokens given.
func (r *rawSeq) subj(stream string, tokens ...any) string {
	s := stream + "." + r.run
	for _, t := range tokens {
		s += fmt.Sprint(".", t)
	}
	return s
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, jetstream.ErrMsgNotFound) }
