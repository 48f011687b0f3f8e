package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RawTurns is what JetStream allows the smallest turn's round trips at
// that many sessions at once: each of writers goroutines does, for d, what
// a turn on its own session does on the wire (ADR 0017), one operation
// after another, with no lash in between: the input's publish, the lease
// claim (a CAS on a bucket's stream), the next input read, the fence, the
// tools' record, the checkpoint's read, the model answer's record (which
// holds the checkpoint's answer), the commit, the read after it
// and the release, on three streams made like lash's. It returns
// these "turns" per second, the ceiling of lash's turns/s on the same
// server and how far more sessions can raise it, and the process's CPU
// per turn (cpuTime).
func (e *Env) RawTurns(ctx context.Context, writers int, d time.Duration) (float64, time.Duration, error) {
	for _, name := range []string{"RAWKV", "RAWSESS", "RAWFX"} {
		if _, err := e.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: e.Replicas}); err != nil {
			return 0, 0, err
		}
	}
	sess, err := e.js.Stream(ctx, "RAWSESS")
	if err != nil {
		return 0, 0, err
	}
	payload := make([]byte, 300)
	e.rawRuns++
	run := e.rawRuns
	var ids, turns atomic.Int64
	cas := func(subj string, last uint64) (uint64, error) {
		ack, err := e.js.Publish(ctx, subj, payload, jetstream.WithMsgID(fmt.Sprintf("raw-%d-%d", run, ids.Add(1))),
			jetstream.WithExpectLastSequencePerSubject(last))
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	read := func(st jetstream.Stream, subj string) error {
		_, err := st.GetLastMsgForSubject(ctx, subj)
		return err
	}
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	start, cpu := time.Now(), cpuTime()
	for w := range writers {
		wg.Go(func() {
			lease := fmt.Sprintf("RAWKV.%d.%d", run, w)
			log := fmt.Sprintf("RAWSESS.%d.%d.ev", run, w)
			in := fmt.Sprintf("RAWSESS.%d.%d.in", run, w)
			var lastLease, lastLog uint64
			for i := 0; time.Since(start) < d; i++ {
				step := func(err error) bool {
					if err != nil {
						errs <- err
					}
					return err == nil
				}
				var err error
				_, err = e.js.Publish(ctx, in, payload)
				if !step(err) {
					return
				}
				if lastLease, err = cas(lease, lastLease); !step(err) || !step(read(sess, in)) {
					return
				}
				if lastLog, err = cas(log, lastLog); !step(err) {
					return
				}
				if _, err = cas(fmt.Sprintf("RAWFX.%d.%d.%d.t", run, w, i), 0); !step(err) || !step(read(sess, in)) {
					return
				}
				if _, err = cas(fmt.Sprintf("RAWFX.%d.%d.%d.m", run, w, i), 0); !step(err) {
					return
				}
				if lastLog, err = cas(log, lastLog); !step(err) || !step(read(sess, in)) {
					return
				}
				if lastLease, err = cas(lease, lastLease); !step(err) {
					return
				}
				turns.Add(1)
			}
		})
	}
	wg.Wait()
	took, cpu := time.Since(start), cpuTime()-cpu
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, fmt.Errorf("raw turns: %w", err)
	}
	n := max(turns.Load(), 1)
	return float64(n) / took.Seconds(), cpu / time.Duration(n), nil
}
