package streams_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bind creates nothing: with no deployment it says so, and it binds one
// that exists, whatever its replication.
func TestBind(t *testing.T) {
	ctx := context.Background()
	nc := testenv.RunJetStream(t).Conn(t)
	if _, err := streams.Bind(ctx, nc, streams.Config{Prefix: "ops"}); !errors.Is(err, streams.ErrNoDeployment) {
		t.Fatalf("bind with no deployment: %v", err)
	}
	if _, err := streams.Open(ctx, nc, streams.Config{Prefix: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Bind(ctx, nc, streams.Config{Prefix: "ops"}); !errors.Is(err, streams.ErrNoDeployment) {
		t.Fatalf("bind created streams, or found another deployment's: %v", err)
	}
	if _, err := streams.Open(ctx, nc, streams.Config{Prefix: "ops"}); err != nil {
		t.Fatal(err)
	}
	c, err := streams.Bind(ctx, nc, streams.Config{Prefix: "ops", Replicas: 3})
	if err != nil {
		t.Fatalf("bind an existing deployment: %v", err)
	}
	if c.Config().Replicas != 1 {
		t.Fatalf("bound with replicas %d, the deployment has 1", c.Config().Replicas)
	}
	if _, err := c.LastSeq(ctx, streams.Sessions); err != nil {
		t.Fatal(err)
	}
	// Sizes are the deployment's: a reading tool takes them as it finds them.
	if _, err := streams.Open(ctx, nc, streams.Config{Prefix: "sized", MaxInputBytes: 128 << 10, InlineBytes: 16 << 10,
		MaxPayloadBytes: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	c, err = streams.Bind(ctx, nc, streams.Config{Prefix: "sized"})
	if err != nil {
		t.Fatalf("bind a deployment with other sizes: %v", err)
	}
	if got := c.Config(); got.MaxInputBytes != 128<<10 || got.InlineBytes != 16<<10 || got.MaxPayloadBytes != 4<<20 {
		t.Fatalf("bound with %+v", got)
	}
	// Open with other sizes is refused, naming the setting.
	_, err = streams.Open(ctx, nc, streams.Config{Prefix: "sized", MaxInputBytes: 128 << 10})
	var se *streams.SchemaError
	if !errors.As(err, &se) || se.Field != "lash.inline_bytes" {
		t.Fatalf("open with another inline size: %v", err)
	}
}

// On a single server the session stream's reads are direct gets (no JSON
// API request); a session stream made without them, by an earlier build,
// is accepted and read through the API, with the same answers.
func TestSessionReadsAreDirectOnOneServer(t *testing.T) {
	ctx := context.Background()
	srv := testenv.RunJetStream(t)
	nc := srv.Conn(t)
	spy := srv.Conn(t)
	var direct, api atomic.Int64
	if _, err := spy.Subscribe("$JS.API.>", func(m *nats.Msg) {
		switch {
		case strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET.ONE_SESSIONS"):
			direct.Add(1)
		case strings.HasPrefix(m.Subject, "$JS.API.STREAM.MSG.GET.ONE_SESSIONS"):
			api.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	read := func(c *streams.Client) {
		t.Helper()
		subj, err := c.Subjects().SessionInputs("s")
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.NextOnSubject(ctx, subj, 1)
		if err != nil || string(m.Data) != "hi" {
			t.Fatalf("read %v, %v", m, err)
		}
		if _, err := c.NextOnSubject(ctx, subj, m.Seq+1); !errors.Is(err, streams.ErrNotFound) {
			t.Fatalf("read past the last input: %v", err)
		}
		if h, err := c.Head(ctx, subj); err != nil || h.Seq != m.Seq || h.Subject != subj || h.Time.IsZero() {
			t.Fatalf("head %+v, %v; want sequence %d", h, err, m.Seq)
		}
		if w, err := c.NextOnSubject(ctx, "one.sess.*.in", 1); err != nil || w.Seq != m.Seq {
			t.Fatalf("wildcard read %+v, %v", w, err)
		}
	}
	c, err := streams.Open(ctx, nc, streams.Config{Prefix: "one"})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().SessionInputs("s")
	if _, err := nc.Request(subj, []byte("hi"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	read(c)
	counted(t, &direct, &api, 4, 0)
	// The stream as an earlier build made it.
	directOff(t, nc, c)()
	c, err = streams.Open(ctx, nc, streams.Config{Prefix: "one"})
	if err != nil {
		t.Fatalf("open a session stream without direct gets: %v", err)
	}
	direct.Store(0)
	read(c)
	counted(t, &direct, &api, 0, 4)
}

// counted waits until the spy has seen the requests it should of two
// kinds (direct and API gets, say; its callback runs after the reads
// return), then checks none more came.
func counted(t *testing.T, direct, api *atomic.Int64, wantDirect, wantAPI int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for (direct.Load() < wantDirect || api.Load() < wantAPI) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if direct.Load() != wantDirect || api.Load() != wantAPI {
		t.Fatalf("requests seen: %d and %d; want %d and %d", direct.Load(), api.Load(), wantDirect, wantAPI)
	}
}

// A client bound while the session stream allowed direct gets keeps
// reading after an operator turns them off: nobody answers the direct get,
// the stream's info says why, and that read and every later one go
// through the API (one info request in all).
func TestDirectGetsTurnedOffWhileBound(t *testing.T) {
	ctx := context.Background()
	srv := testenv.RunJetStream(t)
	nc := srv.Conn(t)
	c, err := streams.Open(ctx, nc, streams.Config{Prefix: "off"})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().SessionInputs("s")
	if _, err := nc.Request(subj, []byte("hi"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	turnOff := directOff(t, nc, c)
	// The spy, subscribed after the set-up's own requests were answered,
	// listens to the API's subjects only: on the direct get subject it
	// would answer for the stream.
	spy := srv.Conn(t)
	var gets, infos atomic.Int64
	for subj, n := range map[string]*atomic.Int64{"$JS.API.STREAM.MSG.GET.OFF_SESSIONS": &gets, "$JS.API.STREAM.INFO.OFF_SESSIONS": &infos} {
		if _, err := spy.Subscribe(subj, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		if m, err := c.NextOnSubject(ctx, subj, 1); err != nil || string(m.Data) != "hi" {
			t.Fatalf("read %v, %v", m, err)
		}
		if h, err := c.Head(ctx, subj); err != nil || string(h.Data) != "hi" {
			t.Fatalf("head %v, %v", h, err)
		}
	}
	read() // direct
	turnOff()
	read()
	read()
	counted(t, &gets, &infos, 4, 1) // API gets, and one info request
}

// directOff reads the session stream's configuration of c's deployment
// and returns what turns its direct gets off, as an operator would.
func directOff(t *testing.T, nc *nats.Conn, c *streams.Client) func() {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), c.Config().StreamName(streams.Sessions))
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		cfg := st.CachedInfo().Config
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
}
