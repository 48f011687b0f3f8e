package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testSchemaMismatch: Open refuses a deployment whose stream or bucket was
// made with other settings, and changes nothing of it.
func testSchemaMismatch(t *testing.T, env Env) {
	cases := []struct {
		name  string
		field string
		// make creates the foreign stream or bucket and returns the name of
		// its stream.
		make func(ctx context.Context, js jetstream.JetStream, prefix string) (string, error)
	}{
		{"other-subjects", "subjects", func(ctx context.Context, js jetstream.JetStream, prefix string) (string, error) {
			name := streamName(prefix, "SESSIONS")
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".sessions.>"},
				Storage: jetstream.FileStorage, Replicas: env.Replicas, Metadata: map[string]string{"lash.schema": strconv.Itoa(streams.SchemaVersion)}})
			return name, err
		}},
		{"other-schema-version", "schema version", func(ctx context.Context, js jetstream.JetStream, prefix string) (string, error) {
			name := streamName(prefix, "SESSIONS")
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".sess.>"},
				Storage: jetstream.FileStorage, Replicas: env.Replicas, AllowAtomicPublish: true,
				Metadata: map[string]string{"lash.schema": "99"}})
			return name, err
		}},
		// A bucket made by the KV API allows direct gets, which lease
		// decisions must not read from.
		{"bucket-made-by-kv-api", "direct get", func(ctx context.Context, js jetstream.JetStream, prefix string) (string, error) {
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketName(prefix), History: 1,
				Storage: jetstream.FileStorage, Replicas: env.Replicas, Metadata: map[string]string{"lash.schema": strconv.Itoa(streams.SchemaVersion)}})
			return "KV_" + bucketName(prefix), err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			prefix := newPrefix()
			nc := env.Conn(t)
			dropDeployment(t, nc, prefix)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			name, err := c.make(ctx, js, prefix)
			if err != nil {
				t.Fatalf("creating the foreign stream: %v", err)
			}
			info := func() *jetstream.StreamInfo {
				t.Helper()
				st, err := js.Stream(ctx, name)
				if err != nil {
					t.Fatalf("stream %s: %v", name, err)
				}
				i, err := st.Info(ctx)
				if err != nil {
					t.Fatalf("stream %s: %v", name, err)
				}
				return i
			}
			before := info()

			_, err = streams.Open(ctx, nc, streams.Config{Prefix: prefix, Replicas: env.Replicas})
			var se *streams.SchemaError
			if !errors.Is(err, streams.ErrSchemaMismatch) || !errors.As(err, &se) {
				t.Fatalf("Open over a foreign %s: got %v, want a *streams.SchemaError", name, err)
			}
			if !strings.Contains(se.Stream, strings.TrimPrefix(name, "KV_")) || se.Field != c.field {
				t.Fatalf("SchemaError names %q field %q; want %s field %q (%v)", se.Stream, se.Field, name, c.field, err)
			}
			after := info()
			if !reflect.DeepEqual(before.Config, after.Config) || before.Created != after.Created ||
				after.State.Msgs != before.State.Msgs {
				t.Fatalf("Open changed the foreign stream %s:\nbefore %+v\nafter  %+v", name, before.Config, after.Config)
			}
		})
	}
}

// testReadReliable: a read of stored messages succeeds, every time, from
// any connection. On a cluster an ordered consumer lives on one server and
// its interest reaches the client's server a moment after it is created.
func testReadReliable(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	const conns, reads = 3, 80
	for c := range conns {
		lg := sessionlog.New(d.reopen(t))
		sid := fmt.Sprintf("read-%d", c)
		if _, _, err := lg.AppendInput(ctx, sid, fmt.Sprintf("m-%d", c), []byte("x")); err != nil {
			t.Fatal(err)
		}
		failed := 0
		var last error
		for range reads {
			n := 0
			err := lg.InputsAfter(ctx, sid, 0, func(sessionlog.Input) error { n++; return nil })
			switch {
			case err != nil:
				failed++
				last = err
			case n != 1:
				failed++
				last = fmt.Errorf("read %d inputs, want 1", n)
			}
		}
		if failed > 0 {
			hint := ""
			if errors.Is(last, nats.ErrNoResponders) {
				hint = " BUG in streams.Read: it creates an ordered consumer and fetches from it at once; on a cluster " +
					"the fetch request can reach the client's server before the consumer's interest does, and the " +
					"\"no responders\" answer is returned instead of retried"
			}
			t.Errorf("connection %d: %d of %d reads of one stored input failed, the last with: %v.%s", c, failed, reads, last, hint)
		}
	}
}

// testUsableAfterOpen: a deployment Open has just created answers at once:
// a lease lookup, a node beat and a session head read.
func testUsableAfterOpen(t *testing.T, env Env) {
	ctx := testCtx(t)
	const opens = 3
	for i := range opens {
		nc := env.Conn(t)
		prefix := newPrefix()
		dropDeployment(t, nc, prefix)
		c, err := streams.Open(ctx, nc, streams.Config{Prefix: prefix, Replicas: env.Replicas})
		if err != nil {
			t.Fatal(err)
		}
		const bug = " BUG in streams.Open: on a cluster it returns before the new lease bucket's direct-get " +
			"responders are known to the client's server, and KVGet passes the \"no responders\" answer up"
		if _, err := c.KVGet(ctx, "node.nobody"); !errors.Is(err, streams.ErrNotFound) {
			hint := ""
			if errors.Is(err, nats.ErrNoResponders) {
				hint = bug
			}
			t.Errorf("open %d: KVGet of an absent key right after Open: %v; want streams.ErrNotFound.%s", i, err, hint)
		}
		if err := leases.New(c, leases.LocalOwner("first")).Beat(ctx, longTTL); err != nil {
			hint := ""
			if errors.Is(err, nats.ErrNoResponders) {
				hint = bug
			}
			t.Errorf("open %d: first Beat right after Open: %v.%s", i, err, hint)
		}
		if h, err := sessionlog.New(c).Head(ctx, "s"); err != nil || h.Seq != 0 {
			t.Errorf("open %d: Head of an empty session right after Open: %+v, %v", i, h, err)
		}
	}
}
