package streams_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestBlobs(t *testing.T) {
	ctx := context.Background()
	nc := testenv.RunJetStream(t).Conn(t)
	c, err := streams.Open(ctx, nc, streams.Config{Prefix: "b"})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16+3) // 5 MiB and a bit: many chunks
	sum, err := c.PutBlob(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	if sum != sha256.Sum256(big) {
		t.Fatal("the blob is not named by its sha256")
	}
	msgs := func() uint64 {
		js, _ := jetstream.New(nc)
		st, err := js.Stream(ctx, "OBJ_"+c.BlobBucket())
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	stored := msgs()
	if _, err := c.PutBlob(ctx, big); err != nil {
		t.Fatal(err)
	}
	if got := msgs(); got != stored {
		t.Fatalf("putting the same bytes again stored %d messages more", got-stored)
	}
	got, err := c.GetBlob(ctx, sum, int64(len(big)))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if size, err := c.BlobSize(ctx, sum); err != nil || size != int64(len(big)) {
		t.Fatalf("size: %d, %v", size, err)
	}
	if _, err := c.GetBlob(ctx, sum, int64(len(big))-1); !errors.Is(err, streams.ErrTooLarge) {
		t.Fatalf("get over the limit: %v", err)
	}
	empty, err := c.PutBlob(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetBlob(ctx, empty, 0); err != nil || len(got) != 0 {
		t.Fatalf("empty blob: %q, %v", got, err)
	}
	missing := sha256.Sum256([]byte("never stored"))
	if _, err := c.GetBlob(ctx, missing, 0); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("missing blob: %v", err)
	}
	// Bytes stored under a name that is not their hash are refused.
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(ctx, c.BlobBucket())
	if err != nil {
		t.Fatal(err)
	}
	forged := sha256.Sum256([]byte("the real content"))
	if _, err := obs.PutBytes(ctx, hexOf(forged), []byte("other content")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetBlob(ctx, forged, 0); !errors.Is(err, streams.ErrCorrupt) {
		t.Fatalf("forged blob: %v", err)
	}
}

// The stream refuses an input over the deployment's input size, headers
// included: nothing too large is stored to be refused later.
func TestInputSizeRefusedAtTheStream(t *testing.T) {
	ctx := context.Background()
	nc := testenv.RunJetStream(t).Conn(t)
	c, err := streams.Open(ctx, nc, streams.Config{Prefix: "in"})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().SessionInputs("s1")
	limit := c.Config().MaxInputBytes
	_, _, err = c.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(strings.Repeat("x", int(limit)+1))})
	if !errors.Is(err, streams.ErrTooLarge) {
		t.Fatalf("an input of %d bytes: %v", limit+1, err)
	}
	if _, err := c.Head(ctx, subj); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("the refused input was stored: %v", err)
	}
	if _, _, err := c.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(strings.Repeat("x", int(limit)-200))}); err != nil {
		t.Fatalf("an input under the limit: %v", err)
	}
}

func hexOf(sum [32]byte) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for _, c := range sum {
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&15])
	}
	return b.String()
}
