package agents_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

func open(t *testing.T) (context.Context, *streams.Client, *testenv.Server) {
	t.Helper()
	srv := testenv.RunJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, srv
}

func def(name, instructions string) *agents.Definition {
	return &agents.Definition{Name: name, Instructions: instructions, Provider: "openai", Model: "gpt-4.1", Tools: []string{"sleep"}}
}

// Applying a definition makes a revision only when it changes the agent;
// a deletion is a revision too; an expected revision is a compare-and-set;
// every revision stays readable by number and by version.
func TestApplyRevisions(t *testing.T) {
	ctx, c, _ := open(t)
	a := agents.New(c, "op")
	if _, err := a.Get(ctx, "support"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("Get before any apply: %v", err)
	}
	r1, changed, err := a.Apply(ctx, def("support", "v1"), 0)
	if err != nil || !changed || r1.Revision != 1 || r1.Version != def("support", "v1").Version() {
		t.Fatalf("first apply = %+v, %v, %v", r1, changed, err)
	}
	same, changed, err := a.Apply(ctx, def("support", "v1"), -1)
	if err != nil || changed || same.Revision != 1 {
		t.Fatalf("the same definition again = %+v, %v, %v; want revision 1 unchanged", same, changed, err)
	}
	if _, _, err := a.Apply(ctx, def("support", "v2"), 0); !errors.Is(err, agents.ErrConflict) {
		t.Fatalf("apply expecting no agent over revision 1: %v", err)
	}
	r2, changed, err := a.Apply(ctx, def("support", "v2"), 1)
	if err != nil || !changed || r2.Revision != 2 {
		t.Fatalf("second apply = %+v, %v, %v", r2, changed, err)
	}
	if _, _, err := a.Apply(ctx, def("support", "v3"), 1); !errors.Is(err, agents.ErrConflict) {
		t.Fatalf("apply expecting a stale revision: %v", err)
	}
	if got, err := a.Get(ctx, "support"); err != nil || got.Revision != 2 || got.Definition.Instructions != "v2" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	for ref, want := range map[string]string{"support": "v2", "support@1": "v1", "support@" + r1.Version[:8]: "v1", "support@" + r2.Version: "v2"} {
		if got, err := a.Resolve(ctx, ref); err != nil || got.Definition.Instructions != want {
			t.Fatalf("Resolve(%s) = %+v, %v; want %s", ref, got, err, want)
		}
	}
	for _, ref := range []string{"support@7", "support@deadbeef", "support@x", "nobody"} {
		if _, err := a.Resolve(ctx, ref); err == nil {
			t.Fatalf("Resolve(%s) found something", ref)
		}
	}
	if _, err := a.Delete(ctx, "support", 1); !errors.Is(err, agents.ErrConflict) {
		t.Fatalf("delete expecting a stale revision: %v", err)
	}
	if d, err := a.Delete(ctx, "support", 2); err != nil || d.Revision != 3 || !d.Deleted {
		t.Fatalf("Delete = %+v, %v", d, err)
	}
	if _, err := a.Delete(ctx, "support", 0); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("deleting a deleted agent: %v", err)
	}
	if _, err := a.Get(ctx, "support"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("Get of a deleted agent: %v", err)
	}
	if got, err := a.Resolve(ctx, "support@1"); err != nil || got.Definition.Instructions != "v1" {
		t.Fatalf("a deleted agent's revision: %+v, %v", got, err)
	}
	// Applied again, it goes on from the deletion's revision.
	r4, changed, err := a.Apply(ctx, def("support", "v1"), 0)
	if err != nil || !changed || r4.Revision != 4 || r4.Version != r1.Version {
		t.Fatalf("apply after the deletion = %+v, %v, %v", r4, changed, err)
	}
	h, err := a.History(ctx, "support")
	if err != nil || len(h) != 4 || !h[2].Deleted {
		t.Fatalf("History = %d records, %v", len(h), err)
	}
	if _, _, err := a.Apply(ctx, def("other", "o"), -1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Apply(ctx, def("gone", "g"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Delete(ctx, "gone", 0); err != nil {
		t.Fatal(err)
	}
	list, bad, err := a.List(ctx)
	if err != nil || len(bad) != 0 || len(list) != 2 || list[0].Definition.Name != "support" || list[1].Definition.Name != "other" {
		t.Fatalf("List = %+v, %v, %v; want support and other", list, bad, err)
	}
}

// An invalid definition writes nothing.
func TestApplyRefusesInvalid(t *testing.T) {
	ctx, c, _ := open(t)
	a := agents.New(c, "op")
	bad := def("support", "x")
	bad.Provider = "nobody"
	if _, _, err := a.Apply(ctx, bad, -1); !errors.Is(err, agents.ErrInvalid) {
		t.Fatalf("Apply of an unknown provider: %v", err)
	}
	if last, err := c.LastSeq(ctx, streams.Agents); err != nil || last != 0 {
		t.Fatalf("the stream after a refusal: last %d, %v; want nothing written", last, err)
	}
}

// On a deployment that signs its records, a definition a plain client
// forged is not an agent: not listed, not read, and a real apply lands
// after it.
func TestForgedDefinitionIgnored(t *testing.T) {
	ctx, c, srv := open(t)
	if err := c.Sign(ctx, bytes.Repeat([]byte{9}, 32)); err != nil {
		t.Fatal(err)
	}
	a := agents.New(c, "op")
	if _, _, err := a.Apply(ctx, def("support", "genuine"), -1); err != nil {
		t.Fatal(err)
	}
	plain, err := streams.Bind(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().Agent("support")
	forged := `{"v":1,"revision":2,"version":"x","definition":{"name":"support","instructions":"forged","provider":"openai","model":"m"},"by":"op"}`
	if _, _, err := plain.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(forged)}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Get(ctx, "support"); err != nil || got.Definition.Instructions != "genuine" {
		t.Fatalf("Get after a forgery = %+v, %v", got, err)
	}
	if list, _, err := a.List(ctx); err != nil || len(list) != 1 || list[0].Definition.Instructions != "genuine" {
		t.Fatalf("List after a forgery = %+v, %v", list, err)
	}
	r, changed, err := a.Apply(ctx, def("support", "next"), 1)
	if err != nil || !changed || r.Revision != 2 {
		t.Fatalf("apply after a forgery = %+v, %v, %v", r, changed, err)
	}
	if h, err := a.History(ctx, "support"); err != nil || len(h) != 2 || strings.Contains(h[1].Definition.Instructions, "forged") {
		t.Fatalf("History = %+v, %v", h, err)
	}
}

// A deleted agent's revisions go once its deletion is older than the
// cutoff; a live agent's never do.
func TestPrune(t *testing.T) {
	ctx, c, _ := open(t)
	a := agents.New(c, "op")
	for _, n := range []string{"kept", "gone"} {
		if _, _, err := a.Apply(ctx, def(n, "x"), -1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Delete(ctx, "gone", 0); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Prune(ctx, time.Now().Add(-time.Hour), false); err != nil || n != 0 {
		t.Fatalf("prune before the cutoff = %d, %v", n, err)
	}
	if n, err := a.Prune(ctx, time.Now().Add(time.Hour), true); err != nil || n != 1 {
		t.Fatalf("dry prune = %d, %v", n, err)
	}
	if _, err := a.History(ctx, "gone"); err != nil {
		t.Fatalf("a dry prune removed something: %v", err)
	}
	if n, err := a.Prune(ctx, time.Now().Add(time.Hour), false); err != nil || n != 1 {
		t.Fatalf("prune = %d, %v", n, err)
	}
	if _, err := a.History(ctx, "gone"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("a pruned agent's history: %v", err)
	}
	if _, err := a.Get(ctx, "kept"); err != nil {
		t.Fatalf("a live agent after the prune: %v", err)
	}
}

// staleHead answers the first head read with the head as it was before:
// a writer that read just before another's write.
type staleHead struct {
	*streams.Client
	once bool
	head *streams.Msg
	at   uint64
}

func (s *staleHead) SignedHead(ctx context.Context, subject string) (*streams.Msg, uint64, error) {
	if !s.once {
		s.once = true
		return s.head, s.at, nil
	}
	return s.Client.SignedHead(ctx, subject)
}

// Two operators who read the same revision and apply other definitions
// both land, one after the other: neither is taken for a retry of the
// other's write.
func TestConcurrentAppliesBothLand(t *testing.T) {
	ctx, c, _ := open(t)
	a := agents.New(c, "op-a")
	if _, _, err := a.Apply(ctx, def("support", "v1"), -1); err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().Agent("support")
	head, at, err := c.SignedHead(ctx, subj)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Apply(ctx, def("support", "v2"), -1); err != nil {
		t.Fatal(err)
	}
	late := agents.New(&staleHead{Client: c, head: head, at: at}, "op-b")
	r, changed, err := late.Apply(ctx, def("support", "v3"), -1)
	if err != nil || !changed || r.Revision != 3 {
		t.Fatalf("the late apply = %+v, %v, %v; want revision 3", r, changed, err)
	}
	if got, err := a.Get(ctx, "support"); err != nil || got.Definition.Instructions != "v3" {
		t.Fatalf("current = %+v, %v; want v3 stored", got, err)
	}
}

// The index follows the stream: applies and deletions show in it without a
// read, a forged record does not, and a lookup ahead of the tail reads the
// store once.
func TestIndex(t *testing.T) {
	ctx, c, srv := open(t)
	if err := c.Sign(ctx, bytes.Repeat([]byte{4}, 32)); err != nil {
		t.Fatal(err)
	}
	a := agents.New(c, "op")
	if _, _, err := a.Apply(ctx, def("support", "v1"), -1); err != nil {
		t.Fatal(err)
	}
	x := agents.NewIndex(a)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = x.Run(rctx) }()
	defer func() { stop(); <-done }()
	wantIn := func(name, instructions string) {
		t.Helper()
		testenv.WaitFor(t, 10*time.Second, func() error {
			r, err := x.Lookup(ctx, name)
			if err != nil || r.Definition.Instructions != instructions {
				return fmt.Errorf("%s: %+v, %v", name, r, err)
			}
			return nil
		})
	}
	wantIn("support", "v1")
	if _, _, err := a.Apply(ctx, def("support", "v2"), -1); err != nil {
		t.Fatal(err)
	}
	wantIn("support", "v2")
	plain, err := streams.Bind(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().Agent("support")
	if _, _, err := plain.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(`{"v":1,"revision":9,"version":"x","definition":{"name":"support","instructions":"forged","provider":"openai","model":"m"},"by":"op"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Apply(ctx, def("other", "o"), -1); err != nil {
		t.Fatal(err)
	}
	wantIn("other", "o")
	wantIn("support", "v2")
	if _, err := a.Delete(ctx, "support", 0); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		if _, err := x.Lookup(ctx, "support"); !errors.Is(err, agents.ErrNotFound) {
			return fmt.Errorf("a deleted agent: %v", err)
		}
		return nil
	})
	if x.Len() != 1 {
		t.Fatalf("the index holds %d agents; want 1", x.Len())
	}
}
