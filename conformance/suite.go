// Package conformance is the executable statement of the guarantees the
// durable layers of lash give (ARCHITECTURE.md §9, ADR 0004 and 0005): lease
// exclusivity and fencing tokens, fenced and idempotent session commits,
// first-writer-wins effect journaling, refusal of a foreign schema, and
// idempotent inputs.
//
// Run is exported so that any package able to provide a JetStream connection
// (an embedded server, a cluster, a lash-node under test, a server behind a
// proxy) runs the same suite against it:
//
//	srv := testenv.RunJetStream(t)
//	conformance.Run(t, conformance.Env{Name: "single", Replicas: 1, Conn: srv.Conn})
//
// Every subtest opens its own deployment with a unique prefix, so subtests
// and several suites may share one server, and deletes it when it ends.
// Nothing waits by sleeping a guessed duration: every wait is a condition
// polled by testenv.WaitFor.
//
// The subtests are grouped by package under test: lease_cases.go,
// session_cases.go, journal_cases.go, blobs_cases.go, streams_cases.go. A subtest that
// fails because of a known defect of a package under test says so in its
// message ("BUG in ..."); such assertions are never relaxed to pass.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Env is a JetStream the suite runs against.
type Env struct {
	// Name labels the environment in failure messages.
	Name string
	// Replicas of every stream and bucket the suite creates: 1 on a single
	// server, 3 on a three-node cluster.
	Replicas int
	// Conn returns a new connection, closed by the callee at t.Cleanup. It
	// is called from subtests, sometimes several times in one.
	Conn func(t testing.TB) *nats.Conn
}

// Timeouts of the suite. They bound waits for conditions that normally hold
// within milliseconds (or within a 1 s TTL); the margin is for loaded
// machines, the race detector and leader elections.
const (
	// subtestTimeout bounds the context of one subtest.
	subtestTimeout = 60 * time.Second
	// expiryTimeout bounds the wait for a 1 s TTL or a 1 s dedupe window.
	expiryTimeout = 15 * time.Second
	// settleTimeout bounds the wait for a read to reflect a write that
	// was acknowledged (on a cluster a follower may answer a read).
	settleTimeout = 5 * time.Second
	// shortTTL is the smallest TTL a lease or a message may have.
	shortTTL = time.Second
	// longTTL outlives every subtest: such a lease expires only if a test
	// forgot to hold it.
	longTTL = 60 * time.Second
	// racers is how many writers race for one thing.
	racers = 8
)

type subtest struct {
	name string
	fn   func(t *testing.T, env Env)
}

var subtests = []subtest{
	{"lease/exclusive", testLeaseExclusive},
	{"lease/tokens-increase", testLeaseTokensIncrease},
	{"lease/stale-renew-release", testLeaseStale},
	{"lease/expiry", testLeaseExpiry},
	{"lease/fast-reclaim", testLeaseFastReclaim},
	{"lease/list", testLeaseList},
	{"lease/nothing-left", testLeaseNothingLeft},
	{"lease/reclaim-after-release", testLeaseReclaimAfterRelease},
	{"lease/read-your-writes", testLeaseReadYourWrites},
	{"lease/unreadable-liveness", testUnreadableLiveness},
	{"sessionlog/racing-commits", testRacingCommits},
	{"sessionlog/racing-retries", testRacingRetries},
	{"sessionlog/fenced-writer", testFencedWriter},
	{"sessionlog/retry-after-dedupe-window", testRetryAfterDedupeWindow},
	{"sessionlog/changed-hash", testChangedHash},
	{"sessionlog/inputs", testInputs},
	{"sessionlog/snapshots", testSnapshots},
	{"sessionlog/sessions-independent", testSessionsIndependent},
	{"sessionlog/malformed-head", testMalformedHead},
	{"sessionlog/recommit-before-position", testRecommitBeforePosition},
	{"effectlog/first-writer-wins", testFirstWriterWins},
	{"effectlog/nondeterminism", testNondeterminism},
	{"effectlog/failure-replays", testFailureReplays},
	{"effectlog/in-doubt", testInDoubt},
	{"blobs/journal-by-reference", testJournalByReference},
	{"blobs/commit-by-reference", testCommitByReference},
	{"blobs/ceiling", testBlobCeiling},
	{"blobs/one-object-per-content", testOneObjectPerContent},
	{"streams/schema-mismatch", testSchemaMismatch},
	{"streams/read-reliable", testReadReliable},
	{"streams/usable-after-open", testUsableAfterOpen},
}

// Run runs the conformance suite against env, one subtest per guarantee.
func Run(t *testing.T, env Env) {
	t.Helper()
	env = Prepare(t, env)
	for _, st := range subtests {
		t.Run(st.name, func(t *testing.T) { st.fn(t, env) })
	}
}

// ---------------------------------------------------------------------------
// Deployments

var (
	prefixRun = func() string {
		var b [3]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(err)
		}
		return hex.EncodeToString(b[:])
	}()
	prefixSeq atomic.Uint64
)

// newPrefix returns a deployment prefix unique in this process and, with
// overwhelming probability, among processes sharing a server.
func newPrefix() string {
	return fmt.Sprintf("cf%s%d", prefixRun, prefixSeq.Add(1))
}

// streamName and bucketName spell ADR 0004's naming rule for prefixes
// without '-' (the only ones newPrefix makes).
func streamName(prefix string, suffix string) string { return strings.ToUpper(prefix) + "_" + suffix }
func bucketName(prefix string) string                { return strings.ToUpper(prefix) + "_LEASES" }

// deployment is one opened deployment of a subtest.
type deployment struct {
	env    Env
	cfg    streams.Config
	client *streams.Client
}

// open creates a deployment with a new prefix and the env's replicas. Its
// streams and bucket are deleted when the subtest ends, so a long suite on
// a cluster does not accumulate raft groups.
func open(t *testing.T, env Env, cfg streams.Config) *deployment {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = newPrefix()
	}
	cfg.Replicas = env.Replicas
	nc := env.Conn(t)
	dropDeployment(t, nc, cfg.Prefix)
	ctx := testCtx(t)
	c, err := streams.Open(ctx, nc, cfg)
	if err != nil {
		t.Fatalf("%s: streams.Open(%+v): %v", env.Name, cfg, err)
	}
	if got, want := c.StreamName(streams.Sessions), streamName(cfg.Prefix, "SESSIONS"); got != want {
		t.Fatalf("sessions stream is named %q, want %q (ADR 0004)", got, want)
	}
	if got, want := c.LeaseBucket(), bucketName(cfg.Prefix); got != want {
		t.Fatalf("lease bucket is named %q, want %q (ADR 0004)", got, want)
	}
	// On a cluster the lease bucket may answer "no responders" for a moment
	// after Open returns (see testUsableAfterOpen, which asserts it does
	// not); subtests about something else wait for it.
	testenv.WaitFor(t, settleTimeout, func() error {
		if _, err := c.KVGet(ctx, "node.nobody"); !errors.Is(err, streams.ErrNotFound) {
			return fmt.Errorf("lease bucket of a new deployment: KVGet = %v, want ErrNotFound", err)
		}
		return nil
	})
	return &deployment{env: env, cfg: cfg, client: c}
}

// reopen opens a second client of the same deployment on a new connection:
// a second worker, with no state shared with the first but the server.
func (d *deployment) reopen(t *testing.T) *streams.Client {
	t.Helper()
	c, err := streams.Open(testCtx(t), d.env.Conn(t), d.cfg)
	if err != nil {
		t.Fatalf("%s: reopening deployment %s: %v", d.env.Name, d.cfg.Prefix, err)
	}
	return c
}

// dropDeployment deletes, at the end of the test, whatever streams and
// bucket a deployment with prefix has then. Registered before the
// deployment is created, it also removes partial or hand-made ones.
func dropDeployment(t *testing.T, nc *nats.Conn, prefix string) {
	t.Cleanup(func() {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{"SESSIONS", "EFFECTS", "PROCESSES", "TRIGGERS"} {
			if err := js.DeleteStream(ctx, streamName(prefix, s)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Logf("cleanup: deleting %s: %v", streamName(prefix, s), err)
			}
		}
		if err := js.DeleteKeyValue(ctx, bucketName(prefix)); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Logf("cleanup: deleting bucket %s: %v", bucketName(prefix), err)
		}
		if err := js.DeleteObjectStore(ctx, strings.ToUpper(prefix)+"_BLOBS"); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Logf("cleanup: deleting object store of %s: %v", prefix, err)
		}
	})
}

// anchor keeps a small stream in the account while the suite runs.
// Subtests delete their deployments; when a deletion leaves an account
// without streams, nats-server (v2.15.2, stream.go, mset.stop) removes the
// account's store directory in a goroutine, which races with the next
// subtest's stream creation ("could not create storage directory ... no
// such file or directory", API error 10049).
func anchor(t *testing.T, env Env) {
	t.Helper()
	nc := env.Conn(t)
	prefix := newPrefix()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := streamName(prefix, "ANCHOR")
	ctx, cancel := context.WithTimeout(t.Context(), subtestTimeout)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".anchor"},
		Storage: jetstream.FileStorage, Replicas: env.Replicas}); err != nil {
		t.Fatalf("%s: creating stream %s: %v", env.Name, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Logf("cleanup: deleting %s: %v", name, err)
		}
	})
}

// read runs a read that is not itself under test, retrying the "no
// responders" error streams.Read returns now and then on a cluster (see
// testReadReliable, which asserts it does not). read must start from
// scratch on each call.
func read(t *testing.T, what string, fn func() error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return
		}
		if !errors.Is(err, nats.ErrNoResponders) || attempt == 5 {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %v (attempt %d; known streams.Read flake, retried)", what, err, attempt)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), subtestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// race runs fn(0..n-1) in n goroutines released at the same moment and
// returns their results by index.
func race[T any](n int, fn func(i int) T) []T {
	out := make([]T, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return out
}
