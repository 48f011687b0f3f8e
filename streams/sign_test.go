package streams_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

// A signing client's records verify for every client with the secret; a
// plain client's record on a subject of truth does not, nor a genuine
// record copied to another subject; records from before the deployment
// was stamped stay trusted; a client with another secret is refused.
func TestSignedRecords(t *testing.T) {
	ctx := context.Background()
	srv := testenv.RunJetStream(t)
	cfg := streams.Config{Prefix: "sig"}
	plain, err := streams.Open(ctx, srv.Conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	subj := plain.Subjects()
	ev, _ := subj.SessionEvents("s1")
	old := publish(t, plain, ev, "from before signing")

	secret := bytes.Repeat([]byte{7}, 32)
	node, err := streams.Open(ctx, srv.Conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if signed, err := node.Signed(ctx); err != nil || signed {
		t.Fatalf("Signed before any stamp = %v, %v", signed, err)
	}
	if err := node.Sign(ctx, secret); err != nil {
		t.Fatal(err)
	}
	reader, err := streams.Bind(ctx, srv.Conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Sign(ctx, secret); err != nil {
		t.Fatalf("a second client with the same secret: %v", err)
	}
	if signed, err := plain.Signed(ctx); err != nil || !signed {
		t.Fatalf("Signed after the stamp = %v, %v", signed, err)
	}

	genuine := publish(t, node, ev, "a node's entry")
	forged := publish(t, plain, ev, "a client's entry")
	in, _ := subj.SessionInputs("s1")
	input := publish(t, plain, in, "a client's input")
	proc, _ := subj.ProcessEvents("p1")
	copied := publish(t, plain, proc, "a node's entry")
	copied.Header = genuine.Header

	for _, c := range []struct {
		name string
		m    *streams.Msg
		want error
	}{
		{"a node's record", genuine, nil},
		{"a record from before the stamp", old, nil},
		{"a client's input", input, nil},
		{"a plain client's record", forged, streams.ErrUnsigned},
		{"a node's signature on another subject", copied, streams.ErrUnsigned},
	} {
		if err := reader.Verify(c.m); !errors.Is(err, c.want) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.want)
		}
	}
	if err := plain.Verify(forged); err != nil {
		t.Errorf("a client that does not sign checks nothing: %v", err)
	}

	other, err := streams.Bind(ctx, srv.Conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Sign(ctx, bytes.Repeat([]byte{8}, 32)); !errors.Is(err, streams.ErrSecretMismatch) {
		t.Fatalf("another secret: %v", err)
	}
	if err := other.Sign(ctx, []byte("short")); err == nil {
		t.Fatal("a short secret was taken")
	}
}

// A timer is signed for its target: the message it fires verifies.
func TestSignedTimerFires(t *testing.T) {
	ctx := context.Background()
	srv := testenv.RunJetStream(t)
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{Prefix: "sigt"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Sign(ctx, bytes.Repeat([]byte{1}, 32)); err != nil {
		t.Fatal(err)
	}
	subj := c.Subjects()
	at, _ := subj.TimerAt("sleep", "s1", "c1")
	due, _ := subj.TimerDue("sleep", "s1", "c1")
	if _, err := c.Schedule(ctx, streams.Timer{Subject: at, Target: due, At: time.Now(), Data: []byte("wake")}); err != nil {
		t.Fatal(err)
	}
	var fired *streams.Msg
	testenv.WaitFor(t, 10*time.Second, func() error {
		m, err := c.NextOnSubject(ctx, due, 1)
		if err != nil {
			return err
		}
		fired = m
		return nil
	})
	if err := c.Verify(fired); err != nil {
		t.Fatalf("the fired timer: %v", err)
	}
}

func publish(t *testing.T, c *streams.Client, subject, data string) *streams.Msg {
	t.Helper()
	ctx := context.Background()
	seq, _, err := c.Publish(ctx, streams.Publication{Subject: subject, Data: []byte(data)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.NextOnSubject(ctx, subject, seq)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
