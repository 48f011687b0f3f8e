package streams_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
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
		MaxPayloadBytes: 4 << 20, JournalRetention: -1}); err != nil {
		t.Fatal(err)
	}
	c, err = streams.Bind(ctx, nc, streams.Config{Prefix: "sized"})
	if err != nil {
		t.Fatalf("bind a deployment with other sizes: %v", err)
	}
	if got := c.Config(); got.MaxInputBytes != 128<<10 || got.InlineBytes != 16<<10 || got.MaxPayloadBytes != 4<<20 || got.JournalRetention != -1 {
		t.Fatalf("bound with %+v", got)
	}
	// Open with other sizes is refused, naming the setting.
	_, err = streams.Open(ctx, nc, streams.Config{Prefix: "sized", MaxInputBytes: 128 << 10, JournalRetention: -1})
	var se *streams.SchemaError
	if !errors.As(err, &se) || se.Field != "lash.inline_bytes" {
		t.Fatalf("open with another inline size: %v", err)
	}
}
