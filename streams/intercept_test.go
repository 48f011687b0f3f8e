package streams_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

// faults is an interceptor whose behaviour a test switches per op: each
// call of an op it is told about gets that fault, the others go as they
// are.
type faults struct {
	mu    sync.Mutex
	kinds map[string]string // op -> "fail", "lose", "twice", "delay"
	ops   []string
	cut   atomic.Bool
}

var (
	errDropped = errors.New("injected: request dropped")
	errLost    = errors.New("injected: reply lost")
)

func (f *faults) set(op, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kind == "" {
		delete(f.kinds, op)
		return
	}
	f.kinds[op] = kind
}

func (f *faults) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

func (f *faults) intercept(ctx context.Context, c streams.Call, do func(context.Context) error) error {
	f.mu.Lock()
	f.ops = append(f.ops, c.Op)
	kind := f.kinds[c.Op]
	f.mu.Unlock()
	if f.cut.Load() {
		return errDropped
	}
	switch kind {
	case "fail":
		return errDropped
	case "lose":
		if err := do(ctx); err != nil {
			return err
		}
		return errLost
	case "twice":
		_ = do(ctx)
		return do(ctx)
	case "delay":
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	case "skip":
		return nil // answers without calling: a broken interceptor
	}
	return do(ctx)
}

func openIntercepted(t *testing.T) (*streams.Client, *faults) {
	t.Helper()
	f := &faults{kinds: map[string]string{}}
	srv := testenv.RunJetStream(t)
	c, err := streams.Open(context.Background(), srv.Conn(t), streams.Config{Intercept: f.intercept})
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

// count is how many messages subject holds.
func count(t *testing.T, c *streams.Client, subject string) int {
	t.Helper()
	n := 0
	if err := c.Read(context.Background(), subject, 0, func(*streams.Msg) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// Every kind of fault reaches the server as it says: a dropped request
// stores nothing, a lost reply stores the write, a repeated one stores it
// once, a delay only delays, and a cut client writes nothing.
func TestInterceptFaults(t *testing.T) {
	ctx := context.Background()
	c, f := openIntercepted(t)
	subj, _ := c.Subjects().SessionInputs("s1")
	pub := func(id string) (uint64, bool, error) {
		return c.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(id), MsgID: id})
	}

	f.set("publish", "fail")
	if _, _, err := pub("a"); !errors.Is(err, errDropped) {
		t.Fatalf("dropped publish: %v", err)
	}
	if n := count(t, c, subj); n != 0 {
		t.Fatalf("a dropped publish stored %d messages", n)
	}

	f.set("publish", "lose")
	if _, _, err := pub("a"); !errors.Is(err, errLost) {
		t.Fatalf("publish whose reply was lost: %v", err)
	}
	f.set("publish", "")
	seq, dup, err := pub("a")
	if err != nil || !dup || count(t, c, subj) != 1 {
		t.Fatalf("retry after a lost reply: seq %d dup %v, %v; %d stored", seq, dup, err, count(t, c, subj))
	}

	f.set("publish", "twice")
	if _, _, err := pub("b"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, subj); n != 2 {
		t.Fatalf("a repeated publish with a msg id: %d messages, want 2", n)
	}

	// A compare-and-set repeated, or retried after a lost reply, lands once
	// and is told it landed: the msg id names it after the conflict.
	ev, _ := c.Subjects().SessionEvents("s1")
	f.set("append", "twice")
	first, _, err := c.Append(ctx, streams.Publication{Subject: ev, Data: []byte("x"), MsgID: "x"}, 0)
	if err != nil || count(t, c, ev) != 1 {
		t.Fatalf("repeated append: %d, %v; %d stored", first, err, count(t, c, ev))
	}
	f.set("append", "lose")
	if _, _, err := c.Append(ctx, streams.Publication{Subject: ev, Data: []byte("y"), MsgID: "y"}, first); !errors.Is(err, errLost) {
		t.Fatalf("append whose reply was lost: %v", err)
	}
	f.set("append", "")
	second, dup, err := c.Append(ctx, streams.Publication{Subject: ev, Data: []byte("y"), MsgID: "y"}, first)
	if err != nil || !dup || second <= first || count(t, c, ev) != 2 {
		t.Fatalf("append retried after a lost reply: %d dup %v, %v", second, dup, err)
	}

	// A read made twice hands each message over once.
	f.set("direct.read", "twice")
	if n := count(t, c, subj); n != 2 {
		t.Fatalf("a repeated read: %d messages, want 2", n)
	}
	f.set("direct.read", "")

	f.set("publish", "delay")
	began := time.Now()
	if _, _, err := pub("c"); err != nil || time.Since(began) < 50*time.Millisecond {
		t.Fatalf("delayed publish: %v after %v", err, time.Since(began))
	}
	f.set("publish", "")

	f.cut.Store(true)
	if _, _, err := pub("d"); !errors.Is(err, errDropped) {
		t.Fatalf("publish of a cut client: %v", err)
	}
	if _, err := c.KVCreate(ctx, "k", []byte("v"), time.Second); !errors.Is(err, errDropped) {
		t.Fatalf("create of a cut client: %v", err)
	}
	if _, err := c.Head(ctx, subj); !errors.Is(err, errDropped) {
		t.Fatalf("read of a cut client: %v", err)
	}
	f.cut.Store(false)
	if n := count(t, c, subj); n != 3 {
		t.Fatalf("after the cut: %d messages, want 3", n)
	}
	if _, err := c.KVGet(ctx, "k"); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("the cut client's create: %v", err)
	}

	f.set("kv.get", "skip")
	if _, err := c.KVGet(ctx, "k"); err == nil {
		t.Fatal("a call the interceptor never made succeeded")
	}
}

// A lease bucket key created twice holds the first write, and the second
// is told the key is taken: a claimant reads the key to learn it is its
// own (leases.Claim does).
func TestInterceptRepeatedCreate(t *testing.T) {
	ctx := context.Background()
	c, f := openIntercepted(t)
	f.set("kv.create", "twice")
	if _, err := c.KVCreate(ctx, "k", []byte("mine"), 5*time.Second); !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("repeated create: %v", err)
	}
	f.set("kv.create", "")
	e, err := c.KVGet(ctx, "k")
	if err != nil || string(e.Value) != "mine" {
		t.Fatalf("the key: %+v, %v", e, err)
	}
}

// Every round trip goes through the interceptor, named by what it does.
func TestInterceptSeesEveryCall(t *testing.T) {
	ctx := context.Background()
	c, f := openIntercepted(t)
	in, _ := c.Subjects().SessionInputs("s1")
	ev, _ := c.Subjects().SessionEvents("s1")
	fx := "lash.fx.s1.t.1._.r"
	steps := []func() error{
		func() error {
			_, _, err := c.Publish(ctx, streams.Publication{Subject: in, Data: []byte("a")})
			return err
		},
		func() error {
			_, _, err := c.Append(ctx, streams.Publication{Subject: ev, Data: []byte("a")}, 0)
			return err
		},
		func() error { _, err := c.Head(ctx, ev); return err },
		func() error {
			_, _, err := c.Append(ctx, streams.Publication{Subject: fx, Data: []byte("a")}, 0)
			return err
		},
		func() error { _, err := c.NextOnSubject(ctx, fx, 1); return err },
		func() error {
			_, err := c.AppendBatch(ctx, []streams.BatchEntry{{Publication: streams.Publication{Subject: fx, Data: []byte("b")}}})
			return err
		},
		func() error { return c.Read(ctx, "lash.fx.s1.>", 0, func(*streams.Msg) error { return nil }) },
		func() error {
			rev, err := c.KVCreate(ctx, "k", []byte("v"), 5*time.Second)
			if err == nil {
				rev, err = c.KVSwap(ctx, "k", []byte("w"), rev, 5*time.Second)
			}
			if err == nil {
				_, err = c.KVGet(ctx, "k")
			}
			if err == nil {
				_, err = c.KVDelete(ctx, "k", rev)
			}
			return err
		},
		func() error {
			sum, err := c.PutBlob(ctx, []byte("blob"))
			if err == nil {
				_, err = c.GetBlob(ctx, sum, 100)
			}
			return err
		},
		func() error { _, err := c.LastSeq(ctx, streams.Sessions); return err },
		func() error { return c.Read(ctx, in, 0, func(*streams.Msg) error { return nil }) },
		func() error {
			d, err := c.Dispatcher(ctx, streams.Sessions, "d", []string{in}, time.Second)
			if err != nil {
				return err
			}
			var acked error
			n, err := d.Fetch(ctx, 1, time.Second, func(dl *streams.Delivery) { acked = dl.Ack() })
			if err == nil && n != 1 {
				err = fmt.Errorf("fetched %d", n)
			}
			return errors.Join(err, acked)
		},
		func() error { return c.Objects(ctx, func(streams.ObjectInfo) error { return nil }) },
		func() error { return c.Purge(ctx, fx) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	ops := f.seen()
	for _, op := range []string{"publish", "append", "direct.get", "direct.read", "get", "batch", "tail", "info", "kv.create",
		"kv.swap", "kv.get", "kv.delete", "blob.info", "blob.put", "blob.list", "consumer", "fetch", "ack", "purge"} {
		if !slices.Contains(ops, op) {
			t.Errorf("no %q call seen in %v", op, fmt.Sprint(ops))
		}
	}
}
