package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func open(t *testing.T, cfg streams.Config) *streams.Client {
	t.Helper()
	srv := testenv.RunJetStream(t)
	c, err := streams.Open(context.Background(), srv.Conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAppendCompareAndSet(t *testing.T) {
	ctx := context.Background()
	c := open(t, streams.Config{})
	subj, _ := c.Subjects().SessionEvents("s1")
	seq, dup, err := c.Append(ctx, streams.Publication{Subject: subj, Data: []byte("a"), MsgID: "a"}, 0)
	if err != nil || dup {
		t.Fatalf("first append: %d %v %v", seq, dup, err)
	}
	// The same write retried at the same head: it already landed.
	again, dup, err := c.Append(ctx, streams.Publication{Subject: subj, Data: []byte("a"), MsgID: "a"}, 0)
	if err != nil || !dup || again != seq {
		t.Fatalf("retry: got %d dup=%v err=%v, want %d dup", again, dup, err, seq)
	}
	// Another write at the stale head is a conflict.
	_, _, err = c.Append(ctx, streams.Publication{Subject: subj, Data: []byte("b"), MsgID: "b"}, 0)
	var ce *streams.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, streams.ErrConflict) || ce.Expected != 0 {
		t.Fatalf("stale append: %v", err)
	}
	next, _, err := c.Append(ctx, streams.Publication{Subject: subj, Data: []byte("b"), MsgID: "b"}, seq)
	if err != nil || next <= seq {
		t.Fatalf("append at head: %d %v", next, err)
	}
	head, err := c.Head(ctx, subj)
	if err != nil || head.Seq != next || string(head.Data) != "b" {
		t.Fatalf("head: %+v %v", head, err)
	}
}

func TestAppendBatchIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	c := open(t, streams.Config{})
	a, _ := c.Subjects().SessionEvents("a")
	b, _ := c.Subjects().SessionEvents("b")
	seqs, err := c.AppendBatch(ctx, []streams.BatchEntry{
		{Publication: streams.Publication{Subject: a, Data: []byte("1")}, Expect: streams.Expect(0)},
		{Publication: streams.Publication{Subject: b, Data: []byte("1")}, Expect: streams.Expect(0)},
	})
	if err != nil || len(seqs) != 2 || seqs[1] != seqs[0]+1 {
		t.Fatalf("batch: %v %v", seqs, err)
	}
	// One stale check rejects the whole batch.
	_, err = c.AppendBatch(ctx, []streams.BatchEntry{
		{Publication: streams.Publication{Subject: a, Data: []byte("2")}, Expect: streams.Expect(seqs[0])},
		{Publication: streams.Publication{Subject: b, Data: []byte("2")}, Expect: streams.Expect(0)},
	})
	if !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("stale batch: %v", err)
	}
	head, _ := c.Head(ctx, a)
	if head.Seq != seqs[0] {
		t.Fatalf("a moved to %d after a rejected batch", head.Seq)
	}
}

func TestReadRange(t *testing.T) {
	ctx := context.Background()
	c := open(t, streams.Config{})
	subj, _ := c.Subjects().SessionInputs("s")
	other, _ := c.Subjects().SessionInputs("t")
	var want []uint64
	for i := range 600 { // more than one batch of direct gets, among another subject's
		seq, _, err := c.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seq)
		if _, _, err := c.Publish(ctx, streams.Publication{Subject: other, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := c.Read(ctx, subj, 0, func(*streams.Msg) error {
		if n++; n == 300 {
			return stop
		}
		return nil
	}); err != stop || n != 300 {
		t.Fatalf("read stopped by its callback after %d: %v, want %v as it is", n, err, stop)
	}
	var got []uint64
	if err := c.Read(ctx, subj, want[100], func(m *streams.Msg) error { got = append(got, m.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 500 || got[0] != want[100] || got[499] != want[599] {
		t.Fatalf("read %d messages from %v to %v", len(got), got[:1], got[len(got)-1:])
	}
	for i, seq := range got {
		if seq != want[100+i] {
			t.Fatalf("message %d of the read is %d, want %d", i, seq, want[100+i])
		}
	}
	empty, _ := c.Subjects().SessionInputs("nobody")
	if err := c.Read(ctx, empty, 0, func(*streams.Msg) error { return errors.New("called") }); err != nil {
		t.Fatal(err)
	}
}

func TestKV(t *testing.T) {
	ctx := context.Background()
	c := open(t, streams.Config{})
	rev, err := c.KVCreate(ctx, "sess.a", []byte("x"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KVCreate(ctx, "sess.a", []byte("y"), time.Second); !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	rev2, err := c.KVSwap(ctx, "sess.a", []byte("z"), rev, 5*time.Second)
	if err != nil || rev2 <= rev {
		t.Fatalf("swap: %d %v", rev2, err)
	}
	if _, err := c.KVSwap(ctx, "sess.a", []byte("w"), rev, 5*time.Second); !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("stale swap: %v", err)
	}
	if _, err := c.KVDelete(ctx, "sess.a", rev); !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("stale delete: %v", err)
	}
	e, err := c.KVGet(ctx, "sess.a")
	if err != nil || string(e.Value) != "z" {
		t.Fatalf("get: %v %v", e, err)
	}
	if _, err := c.KVDelete(ctx, "sess.a", rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KVGet(ctx, "sess.a"); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	rev3, err := c.KVCreate(ctx, "sess.a", []byte("again"), time.Second)
	if err != nil || rev3 <= rev2 {
		t.Fatalf("create after delete: %d %v", rev3, err)
	}
}

// A read cut short by a closed connection is an error, never a short
// success.
func TestReadFailsWhenTheConnectionCloses(t *testing.T) {
	ctx := context.Background()
	srv := testenv.RunJetStream(t)
	nc := srv.Conn(t)
	c, err := streams.Open(ctx, nc, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().SessionInputs("s")
	// More than a consumer buffers in the client, so the rest must come
	// from the server.
	const total = 2000
	for i := range total {
		if _, _, err := c.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	err = c.Read(ctx, subj, 0, func(*streams.Msg) error {
		if n++; n == 3 {
			nc.Close()
		}
		return nil
	})
	if err == nil {
		t.Fatalf("Read returned no error after %d of %d messages", n, total)
	}
}

// A key deleted at its revision leaves nothing in the bucket once its
// marker's TTL runs out, however many keys were ever used: listing leases
// costs what the live ones do.
func TestKVDeleteLeavesNothing(t *testing.T) {
	ctx := context.Background()
	srv := testenv.RunJetStream(t)
	nc := srv.Conn(t)
	c, err := streams.Open(ctx, nc, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for _, key := range []string{"sess.a", "sess.b", "sess.c"} {
		rev, err := c.KVCreate(ctx, key, []byte("x"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rev, err = c.KVSwap(ctx, key, []byte("y"), rev, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if last, err = c.KVDelete(ctx, key, rev); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var st jetstream.Stream
	testenv.WaitFor(t, 10*time.Second, func() error {
		if st, err = js.Stream(ctx, "KV_LASH_LEASES"); err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("the bucket still holds %d messages", n)
		}
		return nil
	})
	// The release markers were removed as subject delete markers: the
	// server wrote none of its own when they expired (a write each, and a
	// fsync each on a server that fsyncs).
	if got := st.CachedInfo().State.LastSeq; got != last {
		t.Fatalf("the bucket's last sequence is %d, the last release marker's %d: the server wrote markers of its own", got, last)
	}
}

// The LIVE stream takes at most MaxLiveConsumers consumers: one more is
// refused by the server, whoever asks.
func TestLiveConsumersCapped(t *testing.T) {
	c := open(t, streams.Config{})
	ctx := context.Background()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, c.StreamName(streams.Live))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxConsumers; got != streams.MaxLiveConsumers {
		t.Fatalf("the LIVE stream takes %d consumers, want %d", got, streams.MaxLiveConsumers)
	}
	for i := range streams.MaxLiveConsumers {
		if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: fmt.Sprint("c", i), InactiveThreshold: time.Minute}); err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
	}
	if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: "one-more", InactiveThreshold: time.Minute}); err == nil ||
		!strings.Contains(err.Error(), "maximum consumers") {
		t.Fatalf("consumer %d: %v; want it refused", streams.MaxLiveConsumers+1, err)
	}
}
