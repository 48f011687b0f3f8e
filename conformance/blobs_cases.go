package conformance

import (
	"bytes"
	"errors"
	"testing"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go/jetstream"
)

func blobStore(c *streams.Client) *blobs.Store {
	cfg := c.Config()
	return blobs.New(c, blobs.Limits{Inline: cfg.InlineBytes, Max: cfg.MaxPayloadBytes})
}

// payload is n bytes that differ per name.
func payload(name string, n int) []byte {
	return bytes.Repeat([]byte(name+" "), n/(len(name)+1)+1)[:n]
}

// testJournalByReference: an outcome above the inline size is recorded as a
// reference, its record fits the stream, and every reader (Lookup, Load, a
// losing recorder) gets the bytes back.
func testJournalByReference(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	big := payload("answer", 3<<20) // three times the EFFECTS message limit
	key := turn.ReplayKey{Session: "ref", Turn: "in-1", Kind: turn.KindLLMCall, Effect: 2}
	h := hashOf("llm")
	j := effectlog.New(d.client, effectlog.WithRecorder("a"), effectlog.WithBlobs(blobStore(d.client)))
	rec, won, err := j.Record(ctx, key, h, effectlog.Outcome{Data: big})
	if err != nil || !won {
		t.Fatalf("record of %d bytes: won %v, %v", len(big), won, err)
	}
	if rec.Ref == nil || rec.Ref.Size != int64(len(big)) {
		t.Fatalf("record of %d bytes kept inline or with a wrong reference: %v", len(big), rec.Ref)
	}
	other := effectlog.New(d.reopen(t), effectlog.WithRecorder("b"), effectlog.WithBlobs(blobStore(d.client)))
	got, err := other.Lookup(ctx, key, h)
	if err != nil || !bytes.Equal(got.Outcome.Data, big) {
		t.Fatalf("lookup on another client: %d bytes, %v", len(got.Outcome.Data), err)
	}
	loser, won, err := other.Record(ctx, key, h, effectlog.Outcome{Data: payload("other", 2<<20)})
	if err != nil || won || !bytes.Equal(loser.Outcome.Data, big) {
		t.Fatalf("a losing recorder: won %v, %d bytes, %v", won, len(loser.Outcome.Data), err)
	}
	recs := load(t, ctx, other, "ref", "in-1")
	if len(recs) != 1 || !bytes.Equal(recs[0].Outcome.Data, big) {
		t.Fatalf("load: %d records", len(recs))
	}
	// A journal that reads no object store says so instead of replaying an
	// empty answer.
	plain := effectlog.New(d.client)
	if _, err := plain.Lookup(ctx, key, h); !errors.Is(err, effectlog.ErrMalformed) {
		t.Fatalf("lookup without an object store: %v", err)
	}
}

// testCommitByReference: a commit body above the inline size is kept by
// reference under its content hash; the commit stays idempotent by stamp.
func testCommitByReference(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	log := sessionlog.New(d.client, sessionlog.WithBlobs(blobStore(d.client)))
	pos, err := log.Fence(ctx, "big", 1, "w")
	if err != nil {
		t.Fatal(err)
	}
	body := payload("body", 2<<20)
	p1, err := log.Commit(ctx, pos, "in-1", body)
	if err != nil {
		t.Fatalf("commit of %d bytes: %v", len(body), err)
	}
	if p2, err := log.Commit(ctx, pos, "in-1", body); err != nil || p2.Seq() != p1.Seq() {
		t.Fatalf("retrying the commit: %v, %v", p2.Seq(), err)
	}
	var ce *sessionlog.CommitConflictError
	if _, err := log.Commit(ctx, pos, "in-1", payload("changed", 2<<20)); !errors.As(err, &ce) {
		t.Fatalf("the same turn with another body: %v", err)
	}
	var entries []*sessionlog.Entry
	read(t, "Read", func() error {
		entries = nil
		return log.Read(ctx, "big", 0, func(_ uint64, e *sessionlog.Entry) error { entries = append(entries, e); return nil })
	})
	last := entries[len(entries)-1]
	if !last.ByRef() || last.BodyRef().Sum != sessionlog.ContentHash(body) {
		t.Fatalf("commit entry: by reference %v, ref %s", last.ByRef(), last.BodyRef())
	}
	got, err := log.Body(ctx, "big", last)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("body: %d bytes, %v", len(got), err)
	}
}

// testBlobCeiling: a payload above the ceiling is refused before anything
// is stored.
func testBlobCeiling(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{MaxPayloadBytes: 1 << 20})
	store := blobStore(d.client)
	_, err := store.Put(ctx, blobs.Owner{Kind: blobs.KindRecord, Session: "ceil", Turn: "in-1"}, payload("huge", 1<<20+1))
	var tl *blobs.TooLargeError
	if !errors.As(err, &tl) || tl.Max != 1<<20 {
		t.Fatalf("a payload over the ceiling: %v", err)
	}
	j := effectlog.New(d.client, effectlog.WithBlobs(store))
	key := turn.ReplayKey{Session: "ceil", Turn: "in-1", Kind: turn.KindLLMCall, Effect: 2}
	if _, _, err := j.Record(ctx, key, hashOf("x"), effectlog.Outcome{Data: payload("huge", 1<<20+1)}); !errors.Is(err, blobs.ErrTooLarge) {
		t.Fatalf("recording an outcome over the ceiling: %v", err)
	}
	if n := objects(t, d); n != 0 {
		t.Fatalf("%d messages stored in the object store", n)
	}
}

// testOneObjectPerContent: the same bytes put by racing writers for one
// owner are one object, readable by all; another owner's is another.
func testOneObjectPerContent(t *testing.T, env Env) {
	ctx := testCtx(t)
	d := open(t, env, streams.Config{})
	data := payload("shared", 600<<10)
	owner := blobs.Owner{Kind: blobs.KindRecord, Session: "s1", Turn: "in-1"}
	res := race(racers, func(i int) error {
		_, err := blobStore(d.client).Put(ctx, owner, data)
		return err
	})
	for i, err := range res {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	ref := blobs.Ref{Sum: sessionlog.ContentHash(data), Size: int64(len(data))}
	got, err := blobStore(d.reopen(t)).Get(ctx, owner, ref)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	before := objects(t, d)
	if _, err := blobStore(d.client).Put(ctx, owner, data); err != nil {
		t.Fatal(err)
	}
	if after := objects(t, d); after != before {
		t.Fatalf("a later put of the same bytes stored %d messages", after-before)
	}
	if _, err := blobStore(d.client).Get(ctx, owner, blobs.Ref{Sum: sessionlog.ContentHash([]byte("absent")), Size: 6}); !errors.Is(err, blobs.ErrMissing) {
		t.Fatalf("a missing object: %v", err)
	}
	// Another owner's copy is its own object, deleted with it alone.
	other := blobs.Owner{Kind: blobs.KindRecord, Session: "s2", Turn: "in-1"}
	if _, err := blobStore(d.client).Put(ctx, other, data); err != nil {
		t.Fatal(err)
	}
	if n, err := blobStore(d.client).Delete(ctx, other, ref); err != nil || n != int64(len(data)) {
		t.Fatalf("deleting s2's copy: %d bytes, %v", n, err)
	}
	if _, err := blobStore(d.client).Get(ctx, other, ref); !errors.Is(err, blobs.ErrMissing) {
		t.Fatalf("s2's deleted copy: %v", err)
	}
	if got, err := blobStore(d.client).Get(ctx, owner, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("s1's copy after s2's went: %d bytes, %v", len(got), err)
	}
	if after := objects(t, d); after != before {
		t.Fatalf("a deleted object left %d messages", after-before)
	}
}

// objects counts the messages of the deployment's object store.
func objects(t *testing.T, d *deployment) uint64 {
	t.Helper()
	js, err := jetstream.New(d.client.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(testCtx(t), "OBJ_"+d.client.BlobBucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
