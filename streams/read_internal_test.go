package streams

import (
	"context"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
)

// A read whose messages were found but are gone before its consumer
// delivers any (a purge, a fired schedule between the look and the
// consumer) ends once the leader says nothing is there, instead of
// waiting as long as its context lasts.
func TestReadEndsWhenWhatItFoundIsGone(t *testing.T) {
	srv := testenv.RunJetStream(t)
	c, err := Open(context.Background(), srv.Conn(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	subj, err := c.Subjects().SessionInputs("s")
	if err != nil {
		t.Fatal(err)
	}
	seq, _, err := c.Publish(ctx, Publication{Subject: subj, Data: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Purge(ctx, subj); err != nil { // gone after the look, before the consumer
		t.Fatal(err)
	}
	called := 0
	if err := c.readTail(ctx, c.streams[Sessions], []string{subj}, seq, seq, func(*Msg) error { called++; return nil }); err != nil || called != 0 {
		t.Fatalf("read: %d messages, %v; want none and the end", called, err)
	}
}
