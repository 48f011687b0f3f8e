package projector_test

import (
	"context"
	"testing"
	"time"

	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkRebuild folds a session stream from zero and reports events per
// second, and the ratio to a raw ordered-consumer replay of the same
// messages measured in the same run (x-floor; the target is at least 0.6).
func BenchmarkRebuild(b *testing.B) {
	e := newEnv(b)
	e.writeNamed("bench", 100, 20000)
	last, err := e.c.LastSeq(e.ctx, streams.Sessions)
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		b.Fatal(err)
	}
	st, err := js.Stream(e.ctx, e.c.StreamName(streams.Sessions))
	if err != nil {
		b.Fatal(err)
	}
	var raw, folded time.Duration
	b.ResetTimer()
	for range b.N {
		// The floor: every message through an ordered consumer, no work.
		start := time.Now()
		cons, err := st.OrderedConsumer(e.ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"lash.sess.>"}})
		if err != nil {
			b.Fatal(err)
		}
		it, err := cons.Messages()
		if err != nil {
			b.Fatal(err)
		}
		for {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			if meta, _ := m.Metadata(); meta.Sequence.Stream >= last {
				break
			}
		}
		it.Stop()
		raw += time.Since(start)

		p, err := projector.Open(b.TempDir(), e.c, projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>",
			Folds: []projector.Fold{projector.NewSessions("lash")}})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := p.CatchUp(context.Background()); err != nil {
			b.Fatal(err)
		}
		folded += time.Since(start)
		if p.Applied() != last {
			b.Fatalf("folded to %d of %d", p.Applied(), last)
		}
		p.Close()
	}
	b.StopTimer()
	n := float64(last) * float64(b.N)
	b.ReportMetric(n/folded.Seconds(), "events/s")
	b.ReportMetric(n/raw.Seconds(), "raw-events/s")
	b.ReportMetric(raw.Seconds()/folded.Seconds(), "x-floor")
}
