package conformance_test

// Benchmarks of the write primitives against their floor: the raw
// JetStream call that gives the same guarantee, on the same server, with a
// payload of the same size. Each benchmark interleaves the API call and the
// floor call, b.N of each, alternating which goes first, and reports
//
//	ns/op        the API call alone
//	floor-ns/op  the raw call alone
//	x-floor      API time / floor time (target: at most 1.2)
//
// Two sub-benchmarks per primitive:
//
//   - sync=always, the default: the embedded deployment's setting (fsync
//     before every acknowledgement, ARCHITECTURE.md §8). The fsync (about
//     0.2 ms) dominates both calls, so absolute times are noisy, but the
//     interleaved ratio is the stable one: 1.02-1.07 measured on a 2-core
//     machine, run after run.
//   - sync=lazy (fsync every two minutes): a call costs 25-40 µs, so the
//     API's client-side work (encoding, hashing, a context per call, about
//     3-5 µs) shows: 1.08-1.21 measured, with more spread between runs.
//
//	go test -run '^$' -bench . -count 3 ./conformance/

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchEnv is one server with one deployment, and a raw JetStream handle
// on the same connection for the floor.
type benchEnv struct {
	client *streams.Client
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	ctx    context.Context
}

func benchModes(b *testing.B, fn func(b *testing.B, e *benchEnv)) {
	for _, mode := range []struct {
		name string
		opts []testenv.Option
	}{
		{"sync=always", []testenv.Option{testenv.WithSyncAlways()}},
		{"sync=lazy", nil},
	} {
		b.Run(mode.name, func(b *testing.B) {
			srv := testenv.RunJetStream(b, mode.opts...)
			nc := srv.Conn(b)
			ctx := context.Background()
			c, err := streams.Open(ctx, nc, streams.Config{Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(streams.DefaultTimeout))
			if err != nil {
				b.Fatal(err)
			}
			kv, err := js.KeyValue(ctx, c.LeaseBucket())
			if err != nil {
				b.Fatal(err)
			}
			fn(b, &benchEnv{client: c, js: js, kv: kv, ctx: ctx})
		})
	}
}

// measure runs op(i) and floor(i) for i in 0..b.N-1, interleaved, and
// reports their times and ratio.
func measure(b *testing.B, op, floor func(i int) error) {
	b.Helper()
	var opT, floorT time.Duration
	timed := func(f func(int) error, i int) time.Duration {
		start := time.Now()
		if err := f(i); err != nil {
			b.Fatalf("iteration %d: %v", i, err)
		}
		return time.Since(start)
	}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			floorT += timed(floor, i)
			opT += timed(op, i)
		} else {
			opT += timed(op, i)
			floorT += timed(floor, i)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(opT.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(floorT.Nanoseconds())/float64(b.N), "floor-ns/op")
	b.ReportMetric(float64(opT)/float64(floorT), "x-floor")
}

// casPublish is the floor of every session-log and journal write: one
// publish with an expected subject sequence and a msg id.
func (e *benchEnv) casPublish(subject string, data []byte, expect uint64, msgID string) (uint64, error) {
	m := nats.NewMsg(subject)
	m.Data = data
	ack, err := e.js.PublishMsg(e.ctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgID(msgID))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// storedSize is the size of the last message stored on subject.
func (e *benchEnv) storedSize(b *testing.B, subject string) int {
	b.Helper()
	m, err := e.client.Head(e.ctx, subject)
	if err != nil {
		b.Fatal(err)
	}
	return len(m.Data)
}

// BenchmarkJournalRecord: Record of a new key (the first writer wins)
// against a publish with expected subject sequence 0 and a msg id on a
// journal subject.
func BenchmarkJournalRecord(b *testing.B) {
	benchModes(b, func(b *testing.B, e *benchEnv) {
		j := effectlog.New(e.client, effectlog.WithRecorder("bench-node"))
		out := effectlog.Outcome{Data: make([]byte, 256)}
		key := func(i int) turn.ReplayKey {
			return turn.ReplayKey{Session: "bench", Turn: "turn-1", Iteration: 1, Kind: turn.KindLLMCall, Effect: turn.EffectID(i + 2)}
		}
		hash := turn.Hash{1, 2, 3}
		// One record outside the measurement, to size the floor's payload.
		first := turn.ReplayKey{Session: "bench", Turn: "turn-1", Iteration: 1, Kind: turn.KindLLMCall, Effect: 1}
		if _, _, err := j.Record(e.ctx, first, hash, out); err != nil {
			b.Fatal(err)
		}
		subj, err := e.client.Subjects().EffectRecord("bench", "turn-1", 1, "")
		if err != nil {
			b.Fatal(err)
		}
		payload := make([]byte, e.storedSize(b, subj))
		measure(b, func(i int) error {
			_, won, err := j.Record(e.ctx, key(i), hash, out)
			if err == nil && !won {
				err = fmt.Errorf("record %d lost", i)
			}
			return err
		}, func(i int) error {
			s, err := e.client.Subjects().EffectRecord("floor", "turn-1", uint64(i+1), "")
			if err != nil {
				return err
			}
			_, err = e.casPublish(s, payload, 0, "fx:bench-node:"+s)
			return err
		})
	})
}

// BenchmarkCommit: Commit of successive turns on one fenced session, each
// expecting the previous one, against a publish expecting the previous
// sequence of another session's log subject, with a msg id.
func BenchmarkCommit(b *testing.B) {
	benchModes(b, func(b *testing.B, e *benchEnv) {
		lg := sessionlog.New(e.client)
		const token = 1
		head, err := lg.Fence(e.ctx, "bench", token, "bench-node")
		if err != nil {
			b.Fatal(err)
		}
		body := make([]byte, 512)
		if head, err = lg.Commit(e.ctx, head, "turn-first", body); err != nil {
			b.Fatal(err)
		}
		subj, err := e.client.Subjects().SessionEvents("bench")
		if err != nil {
			b.Fatal(err)
		}
		payload := make([]byte, e.storedSize(b, subj))
		floorSubj, err := e.client.Subjects().SessionEvents("floor")
		if err != nil {
			b.Fatal(err)
		}
		var floorHead uint64
		measure(b, func(i int) error {
			next, err := lg.Commit(e.ctx, head, fmt.Sprintf("turn-%d", i), body)
			head = next
			return err
		}, func(i int) error {
			seq, err := e.casPublish(floorSubj, payload, floorHead, fmt.Sprintf("floor:turn-%d", i))
			floorHead = seq
			return err
		})
	})
}

// BenchmarkLeaseClaim: Claim of a free key against a raw kv.Create with
// the same TTL and a value of the same size, on the same bucket.
func BenchmarkLeaseClaim(b *testing.B) {
	benchModes(b, func(b *testing.B, e *benchEnv) {
		m := leases.New(e.client, leases.LocalOwner("bench-node"))
		const ttl = time.Minute
		l, err := m.Claim(e.ctx, "sess.first", ttl)
		if err != nil {
			b.Fatal(err)
		}
		held, err := e.client.KVGet(e.ctx, l.Key)
		if err != nil {
			b.Fatal(err)
		}
		value := make([]byte, len(held.Value))
		measure(b, func(i int) error {
			_, err := m.Claim(e.ctx, fmt.Sprintf("sess.s%d", i), ttl)
			return err
		}, func(i int) error {
			_, err := e.kv.Create(e.ctx, fmt.Sprintf("sess.f%d", i), value, jetstream.KeyTTL(ttl))
			return err
		})
	})
}

// BenchmarkLeaseRenew: Renew of a held lease against the raw renewal: a
// publish to the key's subject expecting its revision, with the TTL
// (kv.Update would drop the key's TTL).
func BenchmarkLeaseRenew(b *testing.B) {
	benchModes(b, func(b *testing.B, e *benchEnv) {
		m := leases.New(e.client, leases.LocalOwner("bench-node"))
		const ttl = time.Minute
		l, err := m.Claim(e.ctx, "sess.renewed", ttl)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Renew(e.ctx, l); err != nil {
			b.Fatal(err)
		}
		held, err := e.client.KVGet(e.ctx, l.Key)
		if err != nil {
			b.Fatal(err)
		}
		value := make([]byte, len(held.Value))
		rev, err := e.kv.Create(e.ctx, "sess.floor", value, jetstream.KeyTTL(ttl))
		if err != nil {
			b.Fatal(err)
		}
		floorSubj := "$KV." + e.client.LeaseBucket() + ".sess.floor"
		measure(b, func(int) error {
			return m.Renew(e.ctx, l)
		}, func(int) error {
			m := nats.NewMsg(floorSubj)
			m.Data = value
			ack, err := e.js.PublishMsg(e.ctx, m, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
			if err == nil {
				rev = ack.Sequence
			}
			return err
		})
	})
}

// BenchmarkJournalRecordByReference: Record of a 1 MiB outcome, kept in the
// object store by reference, against the raw calls it is built on: an
// object store put of the same bytes with the nats.go API, and a publish
// with expected subject sequence 0 of a record of the size Record stores.
// The difference is the look-up that makes a put of stored bytes free.
func BenchmarkJournalRecordByReference(b *testing.B) {
	benchModes(b, func(b *testing.B, e *benchEnv) {
		cfg := e.client.Config()
		store := blobs.New(e.client, blobs.Limits{Inline: cfg.InlineBytes, Max: cfg.MaxPayloadBytes})
		j := effectlog.New(e.client, effectlog.WithRecorder("bench-node"), effectlog.WithBlobs(store))
		obs, err := e.js.ObjectStore(e.ctx, e.client.BlobBucket())
		if err != nil {
			b.Fatal(err)
		}
		// Distinct bytes per call: each is stored, none is found.
		data := func(tag string, i int) []byte {
			d := make([]byte, 1<<20)
			copy(d, fmt.Sprintf("%s %d", tag, i))
			return d
		}
		hash := turn.Hash{1, 2, 3}
		key := func(i int) turn.ReplayKey {
			return turn.ReplayKey{Session: "bench", Turn: "turn-ref", Iteration: 1, Kind: turn.KindLLMCall, Effect: turn.EffectID(i + 2)}
		}
		if _, _, err := j.Record(e.ctx, key(-1), hash, effectlog.Outcome{Data: data("first", 0)}); err != nil {
			b.Fatal(err)
		}
		subj, err := e.client.Subjects().EffectRecord("bench", "turn-ref", 1, "")
		if err != nil {
			b.Fatal(err)
		}
		record := make([]byte, e.storedSize(b, subj))
		measure(b, func(i int) error {
			rec, won, err := j.Record(e.ctx, key(i), hash, effectlog.Outcome{Data: data("op", i)})
			if err == nil && (!won || rec.Ref == nil) {
				err = fmt.Errorf("record %d: won %v, by reference %v", i, won, rec.Ref != nil)
			}
			return err
		}, func(i int) error {
			if _, err := obs.PutBytes(e.ctx, fmt.Sprintf("floor-%d", i), data("floor", i)); err != nil {
				return err
			}
			s, err := e.client.Subjects().EffectRecord("floor", "turn-ref", uint64(i+1), "")
			if err != nil {
				return err
			}
			_, err = e.casPublish(s, record, 0, "fx:bench-node:"+s)
			return err
		})
	})
}
