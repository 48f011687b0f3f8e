package streams_test

import (
	"context"
	"testing"

	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
)

// The embedded server keeps acknowledged writes across a restart on the
// same directory, and fsyncs before acknowledging by default.
func TestEmbeddedServerKeepsWritesAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	start := func(listen string) (*streams.Embedded, *streams.Client) {
		t.Helper()
		e, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: dir, Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		if !e.Server().JetStreamConfig().SyncAlways {
			t.Error("embedded server does not fsync before acknowledging")
		}
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := streams.Open(ctx, nc, streams.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return e, c
	}
	e, c := start("none")
	if e.ClientURL() != "" {
		t.Errorf("listener %q with Listen none", e.ClientURL())
	}
	subj, _ := c.Subjects().SessionEvents("kept")
	seq, _, err := c.Append(ctx, streams.Publication{Subject: subj, Data: []byte("before restart")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.Shutdown()

	e, c = start("127.0.0.1:-1")
	defer e.Shutdown()
	head, err := c.Head(ctx, subj)
	if err != nil || head.Seq != seq || string(head.Data) != "before restart" {
		t.Fatalf("after restart: %+v %v", head, err)
	}
	// Other programs reach it over TCP on loopback.
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatalf("connect to %s: %v", e.ClientURL(), err)
	}
	nc.Close()
}

func TestEmbeddedConfigErrors(t *testing.T) {
	if _, err := streams.StartEmbedded(streams.EmbeddedConfig{}); err == nil {
		t.Error("no store directory accepted")
	}
	if _, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: t.TempDir(), Listen: "nonsense"}); err == nil {
		t.Error("bad listen address accepted")
	}
}
