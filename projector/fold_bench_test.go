package projector_test

import (
	"fmt"
	"testing"

	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
)

// BenchmarkSessionsFold is the fold's own cost per message, without the
// stream: an input and a commit per turn, as a driver writes them.
func BenchmarkSessionsFold(b *testing.B) {
	var msgs []*streams.Msg
	seq := uint64(0)
	for i := range 100 {
		for s := range 100 {
			seq++
			msgs = append(msgs, &streams.Msg{Subject: fmt.Sprintf("lash.sess.s%d.in", s), Seq: seq, Data: []byte("hello")})
			data, err := encodeCommit(1, fmt.Sprintf("turn-%d", i), body(b, fmt.Sprintf("turn-%d", i), i, seq))
			if err != nil {
				b.Fatal(err)
			}
			seq++
			msgs = append(msgs, &streams.Msg{Subject: fmt.Sprintf("lash.sess.s%d.ev", s), Seq: seq, Data: data})
		}
	}
	f := projector.NewSessions("lash")
	p, err := projector.Open(b.TempDir(), nil, projector.Config{Stream: streams.Sessions, Filter: "lash.sess.>", Folds: []projector.Fold{f}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.ReportAllocs()
	b.ResetTimer()
	tx := p.NewTxnForTest()
	for i := range b.N {
		if i%1000 == 999 {
			tx = p.NewTxnForTest()
		}
		m := msgs[i%len(msgs)]
		if err := f.Apply(tx, m); err != nil {
			b.Fatal(err)
		}
	}
}
