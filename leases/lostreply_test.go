package leases_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

var errReplyLost = errors.New("reply lost")

// A renewal whose reply is lost landed all the same: the key moved past
// the revision the lease knows. The next renewal, and a release, go on
// from the revision the key holds, which is still the lease's own; a copy
// of the lease that saw no lost reply is still refused. Before, the next
// renewal took its own landed write for a successor's and gave up a lease
// nobody else had (the seeded store faults showed it).
func TestRenewAfterLostReply(t *testing.T) {
	ctx := context.Background()
	srv := testenv.RunJetStream(t)
	var lose atomic.Bool
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{Intercept: func(ctx context.Context, call streams.Call, do func(context.Context) error) error {
		err := do(ctx)
		if err == nil && (call.Op == "kv.swap" || call.Op == "kv.delete") && lose.CompareAndSwap(true, false) {
			return errReplyLost
		}
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	m := leases.New(c, leases.LocalOwner("n"))
	if err := m.Beat(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l, err := m.Claim(ctx, "sess.s", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lose.Store(true)
	if err := m.Renew(ctx, l); !errors.Is(err, errReplyLost) {
		t.Fatalf("renewal whose reply is lost: %v", err)
	}
	copied := l.Copy()
	before, _ := l.Current()
	if err := m.Renew(ctx, l); err != nil {
		t.Fatalf("the renewal after a lost reply: %v", err)
	}
	if rev, _ := l.Current(); rev <= before+1 {
		t.Fatalf("revision %d after renewing from %d past a landed renewal", rev, before)
	}
	if err := m.Renew(ctx, copied); !errors.Is(err, leases.ErrLost) {
		t.Fatalf("a copy from before the renewals: %v", err)
	}
	lose.Store(true)
	if err := m.Renew(ctx, l); !errors.Is(err, errReplyLost) {
		t.Fatalf("renewal whose reply is lost: %v", err)
	}
	if err := m.Release(ctx, l); err != nil {
		t.Fatalf("release after a lost reply: %v", err)
	}
	if _, err := c.KVGet(ctx, "sess.s"); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("the key after the release: %v", err)
	}
}
