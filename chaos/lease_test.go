package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// leaseRun is how long the workload runs by default; LASH_CHAOS sets
	// another duration.
	leaseRun = 15 * time.Second
	// leaseOpTimeout bounds each call of the workload, drawn between
	// these: a call without an answer by then has an unknown outcome.
	// Short ones end calls that are merely slow (an election, an fsync),
	// long ones those a partition holds.
	leaseOpTimeoutMin = 200 * time.Millisecond
	leaseOpTimeout    = time.Second
	// leaseCheckTimeout bounds porcupine's search. It takes well under a
	// second on a run of leaseRun; past the timeout the result is Unknown.
	leaseCheckTimeout = 2 * time.Minute
	leaseClients      = 5
	// leaseCodeInFlight is the refusal of a replicated stream's leader
	// while another write to the subject is in flight (LeaseInFlight).
	leaseCodeInFlight = 10164
)

// leaseSeed is LASH_CHAOS_SEED, or a new seed; logged either way.
func leaseSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv("LASH_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("LASH_CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay with LASH_CHAOS_SEED=%d)", seed, seed)
	return seed
}

// leaseDuration is LASH_CHAOS as a duration, or leaseRun.
func leaseDuration(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("LASH_CHAOS")
	if s == "" {
		return leaseRun
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("LASH_CHAOS=%q: want a duration such as 2m", s)
	}
	return d
}

// leaseTTL outlives the run by far: the model has no expiry of live keys.
func leaseTTL(run time.Duration) time.Duration {
	return max(time.Hour, 4*run).Truncate(time.Second)
}

// leaseRig is an R3 cluster and clients, each connected to one server
// through a proxy of its own and to nothing else.
type leaseRig struct {
	cluster *testenv.Cluster
	clients []*leaseClient
	stream  string // the lease bucket's stream
	start   time.Time
}

type leaseClient struct {
	id     int
	server int
	// holding is how many keys the client's worker believes it holds,
	// for faults that aim at holders.
	holding atomic.Int32
	proxy   *Proxy
	url     string // the proxy's, the only one the connection may use
	nc      *nats.Conn
	c       *streams.Client
}

func newLeaseRig(t *testing.T, seed uint64, n int) *leaseRig {
	t.Helper()
	r := &leaseRig{cluster: testenv.RunCluster(t, 3, testenv.WithSyncAlways())}
	servers := r.cluster.Servers()
	for i := range n {
		cl := &leaseClient{id: i, server: i % len(servers)}
		u, err := url.Parse(servers[cl.server].URL())
		if err != nil {
			t.Fatal(err)
		}
		if cl.proxy, err = Listen(u.Host, seed+uint64(i)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.proxy.Close() })
		cl.url = "nats://" + cl.proxy.Addr()
		// One URL and no discovered ones: the server's INFO lists the
		// other servers' client URLs (connect_urls), which would let the
		// client reconnect around its proxy.
		cl.nc, err = nats.Connect(cl.url,
			nats.Name(fmt.Sprintf("lease-client-%d", i)),
			nats.IgnoreDiscoveredServers(),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(50*time.Millisecond),
			nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond),
		)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.nc.Close)
		// One after the other: the first creates the streams, the
		// others find them.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cl.c, err = streams.Open(ctx, cl.nc, streams.Config{Replicas: 3})
		cancel()
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		r.clients = append(r.clients, cl)
	}
	r.stream = "KV_" + r.clients[0].c.LeaseBucket()
	r.start = time.Now()
	return r
}

// now is the time since the rig started, on the monotonic clock.
func (r *leaseRig) now() int64 { return int64(time.Since(r.start)) }

// bypassed reports a connection that reached a server other than through
// its proxy.
func (cl *leaseClient) bypassed() error {
	if servers := cl.nc.Servers(); len(servers) != 1 || servers[0] != cl.url {
		return fmt.Errorf("client %d: server pool %v, want only its proxy %s", cl.id, servers, cl.url)
	}
	if u := cl.nc.ConnectedUrl(); u != "" && u != cl.url {
		return fmt.Errorf("client %d: connected to %s, not its proxy %s", cl.id, u, cl.url)
	}
	return nil
}

// leaseLeader is the index of the server leading the lease bucket, or -1.
func (r *leaseRig) leaseLeader() int {
	for i, s := range r.cluster.Servers() {
		if ns := s.NATS(); ns != nil && ns.JetStreamIsStreamLeader(ns.GlobalAccount().GetName(), r.stream) {
			return i
		}
	}
	return -1
}

// leaseRecord is one call as its client saw it.
type leaseRecord struct {
	client    int
	in        LeaseInput
	out       LeaseOutput
	call, ret int64
	err       string // the error of an unknown outcome
}

// leaseDo makes one call and classifies its outcome. ok is false for a
// read that got no answer: it says nothing and is not recorded.
func (r *leaseRig) leaseDo(cl *leaseClient, in LeaseInput, ttl, timeout time.Duration) (rec leaseRecord, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec = leaseRecord{client: cl.id, in: in, call: r.now()}
	var (
		rev      uint64
		e        *streams.KVEntry
		err      error
		conflict *streams.ConflictError
	)
	switch in.Op {
	case LeaseCreate:
		rev, err = cl.c.KVCreate(ctx, in.Key, []byte(in.Value), ttl)
	case LeaseSwap:
		rev, err = cl.c.KVSwap(ctx, in.Key, []byte(in.Value), in.Rev, ttl)
	case LeaseDelete:
		rev, err = cl.c.KVDelete(ctx, in.Key, in.Rev)
	case LeaseGet:
		e, err = cl.c.KVGet(ctx, in.Key)
	}
	rec.ret = r.now()
	switch {
	case err == nil && e != nil:
		rec.out = LeaseOutput{Outcome: LeaseOK, Rev: e.Revision, Value: string(e.Value)}
	case err == nil:
		rec.out = LeaseOutput{Outcome: LeaseOK, Rev: rev}
	case in.Op == LeaseGet && errors.Is(err, streams.ErrNotFound):
		rec.out = LeaseOutput{Outcome: LeaseAbsent}
	case in.Op == LeaseGet:
		return rec, false
	case errors.As(err, &conflict) && conflict.Code == leaseCodeInFlight:
		rec.out = LeaseOutput{Outcome: LeaseInFlight}
	case errors.Is(err, streams.ErrConflict):
		rec.out = LeaseOutput{Outcome: LeaseRefused}
	default:
		// Whatever else failed may have landed, or may land yet: a
		// publish held by a partition arrives when it heals.
		rec.out = LeaseOutput{Outcome: LeaseUnknown}
		rec.err = err.Error()
	}
	return rec, true
}

// leaseHistory turns records into porcupine operations; unknown outcomes
// return after everything else, so they may take effect at any moment
// after their call.
func leaseHistory(recs []leaseRecord) []porcupine.Operation {
	var last int64
	for _, rec := range recs {
		last = max(last, rec.ret)
	}
	ops := make([]porcupine.Operation, 0, len(recs))
	for _, rec := range recs {
		ret := rec.ret
		if rec.out.Outcome == LeaseUnknown {
			ret = last + 1
		}
		ops = append(ops, porcupine.Operation{ClientId: rec.client, Input: rec.in, Call: rec.call, Output: rec.out, Return: ret, Metadata: rec.err})
	}
	return ops
}

// leaseCheck checks recs and reports the result; on a violation it writes
// porcupine's visualization to name.html and returns its path.
func leaseCheck(t *testing.T, name string, recs []leaseRecord) (porcupine.CheckResult, string) {
	t.Helper()
	ops := leaseHistory(recs)
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(LeaseModel, ops, leaseCheckTimeout)
	t.Logf("porcupine: %d operations, %s in %v", len(ops), res, time.Since(start).Round(time.Millisecond))
	if res != porcupine.Illegal {
		return res, ""
	}
	_, info := porcupine.CheckOperationsVerbose(LeaseModel, ops, leaseCheckTimeout)
	path := filepath.Join(t.ArtifactDir(), name+".html")
	if err := porcupine.VisualizePath(LeaseModel, info, path); err != nil {
		t.Errorf("writing the visualization: %v", err)
		return res, ""
	}
	t.Logf("visualization: %s (kept with go test -artifacts -outputdir DIR)", path)
	// The history itself, one call a line, to check again or cut down.
	var lines []byte
	for _, op := range ops {
		line, _ := json.Marshal(struct {
			Client       int
			Call, Return int64
			In           LeaseInput
			Out          LeaseOutput
			Err          any
		}{op.ClientId, op.Call, op.Return, op.Input.(LeaseInput), op.Output.(LeaseOutput), op.Metadata})
		lines = append(append(lines, line...), '\n')
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), name+".jsonl"), lines, 0o644); err != nil {
		t.Errorf("writing the history: %v", err)
	}
	return res, path
}

// leaseWorker is one client's random walk over the keys: it claims,
// renews, releases, reads, takes over what it read and reclaims over its
// own delete markers, as package leases does, and some calls are stale on
// purpose.
type leaseWorker struct {
	cl   *leaseClient
	rng  *rand.Rand
	keys []string
	// held: the revision of the value this client last wrote per key;
	// seen: the revision it last read; marker: its last delete marker's.
	held, seen, marker map[string]uint64
	n                  int
	recs               []leaseRecord
	bypass             error
}

func (w *leaseWorker) next() LeaseInput {
	key := w.keys[w.rng.IntN(len(w.keys))]
	w.n++
	value := fmt.Sprintf("c%d.%d", w.cl.id, w.n)
	held, seen, marker := w.held[key], w.seen[key], w.marker[key]
	// Holders mostly renew and seldom let go, as leases are used; the
	// others mostly read and claim, now and then take over what they read
	// (a holder found dead), reclaim over their own delete marker, or
	// force a release.
	p := w.rng.IntN(100)
	switch {
	case held != 0 && p < 55:
		return LeaseInput{Op: LeaseSwap, Key: key, Value: value, Rev: held} // renew
	case held != 0 && p < 62:
		return LeaseInput{Op: LeaseDelete, Key: key, Rev: held} // release
	case held != 0 && p < 66:
		return LeaseInput{Op: LeaseCreate, Key: key, Value: value} // claim what it holds
	case held != 0:
	case p < 30:
		return LeaseInput{Op: LeaseCreate, Key: key, Value: value} // claim
	case seen != 0 && p < 35:
		return LeaseInput{Op: LeaseSwap, Key: key, Value: value, Rev: seen} // take over
	case marker != 0 && p < 45:
		return LeaseInput{Op: LeaseSwap, Key: key, Value: value, Rev: marker} // reclaim over its marker
	case seen != 0 && p < 48:
		return LeaseInput{Op: LeaseDelete, Key: key, Rev: seen} // force a release
	}
	return LeaseInput{Op: LeaseGet, Key: key}
}

// learn updates what the client believes after a call.
func (w *leaseWorker) learn(rec leaseRecord) {
	in, out := rec.in, rec.out
	switch {
	case in.Op == LeaseGet && out.Outcome == LeaseOK:
		w.seen[in.Key] = out.Rev
	case in.Op == LeaseGet:
		w.seen[in.Key] = 0
	case out.Outcome == LeaseOK && in.Op == LeaseDelete:
		w.held[in.Key], w.marker[in.Key] = 0, out.Rev
	case out.Outcome == LeaseOK:
		w.held[in.Key], w.marker[in.Key] = out.Rev, 0
	case out.Outcome == LeaseRefused && in.Rev == w.held[in.Key] && in.Op != LeaseCreate:
		w.held[in.Key] = 0 // lost
	case out.Outcome == LeaseRefused && in.Rev == w.marker[in.Key]:
		w.marker[in.Key] = 0
	}
	// An unknown outcome changes nothing the client knows: a renewal
	// at the old revision is refused if it landed.
	n := 0
	for _, rev := range w.held {
		if rev != 0 {
			n++
		}
	}
	w.cl.holding.Store(int32(n))
}

func (r *leaseRig) work(w *leaseWorker, until time.Time, ttl time.Duration) {
	for time.Now().Before(until) {
		timeout := leaseOpTimeoutMin + time.Duration(w.rng.Int64N(int64(leaseOpTimeout-leaseOpTimeoutMin)))
		rec, ok := r.leaseDo(w.cl, w.next(), ttl, timeout)
		if err := w.cl.bypassed(); err != nil && w.bypass == nil {
			w.bypass = err
		}
		if !ok {
			time.Sleep(time.Duration(50+w.rng.IntN(150)) * time.Millisecond)
			continue
		}
		w.recs = append(w.recs, rec)
		w.learn(rec)
		if rec.out.Outcome == LeaseUnknown {
			// The link or the cluster is in trouble: do not pile up
			// calls whose outcome stays open until the end.
			time.Sleep(time.Duration(20+w.rng.IntN(100)) * time.Millisecond)
			continue
		}
		time.Sleep(time.Duration(w.rng.IntN(10)) * time.Millisecond)
	}
}

// leaseFaults runs a seeded schedule of faults on the test's goroutine
// until the deadline, then lifts every fault. Proxy faults overlap; one
// server at most is down at a time, so the cluster keeps a quorum.
func (r *leaseRig) leaseFaults(rng *rand.Rand, until time.Time) (log []string) {
	var pending sync.WaitGroup
	after := func(d time.Duration, f func()) {
		pending.Add(1)
		time.AfterFunc(d, func() { defer pending.Done(); f() })
	}
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	note := func(format string, args ...any) {
		log = append(log, fmt.Sprintf("%6.2fs ", time.Since(r.start).Seconds())+fmt.Sprintf(format, args...))
	}
	for {
		time.Sleep(dur(200*time.Millisecond, 900*time.Millisecond))
		if !time.Now().Before(until) {
			break
		}
		// Mostly a holder: its renewals are the writes that land while
		// their answers are lost, which the model has to place.
		cl := r.clients[rng.IntN(len(r.clients))]
		if rng.IntN(3) > 0 {
			var holders []*leaseClient
			for _, c := range r.clients {
				if c.holding.Load() > 0 {
					holders = append(holders, c)
				}
			}
			if len(holders) > 0 {
				cl = holders[rng.IntN(len(holders))]
			}
		}
		p := cl.proxy
		switch f := rng.IntN(100); {
		case f < 30:
			// Mostly down: requests land and their answers are held, the
			// writes whose outcome the model has to guess.
			dir := []Direction{Up, Down, Down, Both}[rng.IntN(4)]
			d := dur(200*time.Millisecond, 3*time.Second)
			note("partition client %d %s for %v", cl.id, map[Direction]string{Up: "up", Down: "down", Both: "both ways"}[dir], d.Round(time.Millisecond))
			p.Partition(dir)
			after(d, p.Heal)
		case f < 48:
			d, j, span := dur(time.Millisecond, 40*time.Millisecond), dur(time.Millisecond, 40*time.Millisecond), dur(500*time.Millisecond, 3*time.Second)
			note("delay client %d by %v+%v for %v", cl.id, d.Round(time.Millisecond), j.Round(time.Millisecond), span.Round(time.Millisecond))
			p.Delay(d, j)
			after(span, func() { p.Delay(0, 0) })
		case f < 63:
			note("cut client %d", cl.id)
			p.Cut()
		case f < 73:
			d := dur(200*time.Millisecond, 1500*time.Millisecond)
			note("cut and refuse client %d for %v", cl.id, d.Round(time.Millisecond))
			p.Refuse(true)
			p.Cut()
			after(d, func() { p.Refuse(false) })
		default:
			i := r.leaseLeader()
			what := "leader"
			if i < 0 || rng.IntN(3) == 0 {
				i, what = rng.IntN(len(r.cluster.Servers())), "server"
			}
			down := dur(300*time.Millisecond, 3*time.Second)
			note("stop %s %d for %v", what, i, down.Round(time.Millisecond))
			r.cluster.StopServer(i)
			time.Sleep(down)
			r.cluster.RestartServer(i)
			note("server %d back", i)
		}
	}
	pending.Wait()
	for _, cl := range r.clients {
		cl.proxy.Heal()
		cl.proxy.Delay(0, 0)
		cl.proxy.Refuse(false)
	}
	return log
}

// TestLeaseLinearizableCluster checks that the lease bucket, as clients
// see it, is linearizable while their links partition, slow down and drop
// and servers (the bucket's leader among them) stop and restart.
func TestLeaseLinearizableCluster(t *testing.T) {
	testenv.SkipClusterUnderRace(t)
	seed := leaseSeed(t)
	run := leaseDuration(t)
	ttl := leaseTTL(run)
	rng := rand.New(rand.NewPCG(seed, 0x6c65617365))
	r := newLeaseRig(t, seed, leaseClients)
	keys := make([]string, 1+rng.IntN(3))
	for i := range keys {
		keys[i] = fmt.Sprintf("lin.k%d", i)
	}
	t.Logf("%d clients, keys %v, %v of faults, op timeouts %v-%v, TTL %v", len(r.clients), keys, run, leaseOpTimeoutMin, leaseOpTimeout, ttl)

	until := time.Now().Add(run)
	workers := make([]*leaseWorker, len(r.clients))
	var wg sync.WaitGroup
	for i, cl := range r.clients {
		w := &leaseWorker{cl: cl, rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), keys: keys,
			held: map[string]uint64{}, seen: map[string]uint64{}, marker: map[string]uint64{}}
		workers[i] = w
		wg.Go(func() { r.work(w, until, ttl) })
	}
	faults := r.leaseFaults(rng, until)
	wg.Wait()

	// Every fault lifted: each client reads every key, so that writes of
	// unknown outcome have to be placed.
	settle := time.Now().Add(30 * time.Second)
	for _, w := range workers {
		for _, key := range keys {
			for time.Now().Before(settle) {
				rec, ok := r.leaseDo(w.cl, LeaseInput{Op: LeaseGet, Key: key}, ttl, 5*time.Second)
				if ok {
					w.recs = append(w.recs, rec)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}

	var recs []leaseRecord
	counts := map[string]int{}
	for _, w := range workers {
		if w.bypass != nil {
			t.Error(w.bypass)
		}
		if err := w.cl.bypassed(); err != nil {
			t.Error(err)
		}
		recs = append(recs, w.recs...)
		for _, rec := range w.recs {
			counts[rec.in.Op.String()+" "+rec.out.Outcome.String()]++
		}
	}
	t.Logf("faults:\n  %s", strings.Join(faults, "\n  "))
	t.Logf("calls: %v", counts)
	t.Logf("writes of unknown outcome that a read saw land: %d", leaseLanded(recs))
	var lat []int64
	for _, rec := range recs {
		if rec.out.Outcome != LeaseUnknown {
			lat = append(lat, rec.ret-rec.call)
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		t.Logf("latency p50 %v p99 %v p999 %v max %v", time.Duration(lat[len(lat)/2]), time.Duration(lat[len(lat)*99/100]), time.Duration(lat[len(lat)*999/1000]), time.Duration(lat[len(lat)-1]))
	}
	for _, cl := range r.clients {
		s := cl.proxy.Stats()
		t.Logf("client %d (server %d): accepted %d, cut %d, refused %d, held %d, delayed %d",
			cl.id, cl.server, s.Accepted.Load(), s.Cut.Load(), s.Refused.Load(), s.Held.Load(), s.Delayed.Load())
	}
	res, path := leaseCheck(t, "lease-history", recs)
	switch res {
	case porcupine.Illegal:
		t.Errorf("the lease bucket's history is not linearizable (seed %d); see %s", seed, path)
	case porcupine.Unknown:
		t.Logf("porcupine did not decide within %v (seed %d): nothing found, nothing shown", leaseCheckTimeout, seed)
	}
}

// leaseLanded counts the writes of unknown outcome whose value was read:
// they landed though their client never heard so, which is what the model
// has to allow for.
func leaseLanded(recs []leaseRecord) int {
	unknown := map[string]bool{}
	for _, rec := range recs {
		if rec.out.Outcome == LeaseUnknown && rec.in.Value != "" {
			unknown[rec.in.Value] = true
		}
	}
	landed := map[string]bool{}
	for _, rec := range recs {
		if rec.in.Op == LeaseGet && unknown[rec.out.Value] {
			landed[rec.out.Value] = true
		}
	}
	return len(landed)
}

// TestLeaseCheckerCatchesCluster is the check of the check: clients that
// break the bucket's rules, against the real cluster, make histories the
// model must reject, while the same calls made correctly pass.
func TestLeaseCheckerCatchesCluster(t *testing.T) {
	testenv.SkipClusterUnderRace(t)
	seed := leaseSeed(t)
	r := newLeaseRig(t, seed, 4)
	ttl := leaseTTL(time.Minute)
	ctx := context.Background()

	// broken writes with no condition, as a client that ignores the
	// revision would make them.
	put := func(cl *leaseClient, key, value string) (uint64, error) {
		js, err := jetstream.New(cl.nc)
		if err != nil {
			return 0, err
		}
		kv, err := js.KeyValue(ctx, cl.c.LeaseBucket())
		if err != nil {
			return 0, err
		}
		return kv.Put(ctx, key, []byte(value))
	}
	// claimAll has every client claim at once, by claim.
	claimAll := func(claim func(cl *leaseClient, value string) leaseRecord) []leaseRecord {
		recs := make([]leaseRecord, len(r.clients))
		var ready, wg sync.WaitGroup
		ready.Add(1)
		for i, cl := range r.clients {
			wg.Go(func() {
				ready.Wait()
				recs[i] = claim(cl, fmt.Sprintf("c%d", cl.id))
			})
		}
		ready.Done()
		wg.Wait()
		return recs
	}
	want := func(name string, recs []leaseRecord, res porcupine.CheckResult) {
		t.Helper()
		for _, rec := range recs {
			if rec.out.Outcome == LeaseUnknown {
				t.Fatalf("%s: a call failed on a healthy cluster: %s", name, rec.err)
			}
		}
		if got, _ := leaseCheck(t, strings.ReplaceAll(name, " ", "-"), recs); got != res {
			t.Errorf("%s: porcupine says %s, want %s", name, got, res)
		}
	}

	// Concurrent claims done right: one wins, the others are refused.
	recs := claimAll(func(cl *leaseClient, value string) leaseRecord {
		rec, _ := r.leaseDo(cl, LeaseInput{Op: LeaseCreate, Key: "catch.good", Value: value}, ttl, 5*time.Second)
		return rec
	})
	want("create", recs, porcupine.Ok)

	// A claim that is a plain put: every claimant "wins".
	recs = claimAll(func(cl *leaseClient, value string) leaseRecord {
		rec := leaseRecord{client: cl.id, in: LeaseInput{Op: LeaseCreate, Key: "catch.put", Value: value}, call: r.now()}
		rev, err := put(cl, "catch.put", value)
		rec.ret = r.now()
		if err != nil {
			rec.out, rec.err = LeaseOutput{Outcome: LeaseUnknown}, err.Error()
		} else {
			rec.out = LeaseOutput{Outcome: LeaseOK, Rev: rev}
		}
		return rec
	})
	want("claim by put", recs, porcupine.Illegal)

	// A renewal without the revision check, after another client took the
	// lease over: the stale holder's renewal must have been refused.
	a, b := r.clients[0], r.clients[1]
	claim, _ := r.leaseDo(a, LeaseInput{Op: LeaseCreate, Key: "catch.renew", Value: "a1"}, ttl, 5*time.Second)
	over, _ := r.leaseDo(b, LeaseInput{Op: LeaseSwap, Key: "catch.renew", Value: "b1", Rev: claim.out.Rev}, ttl, 5*time.Second)
	good, _ := r.leaseDo(a, LeaseInput{Op: LeaseSwap, Key: "catch.renew", Value: "a2", Rev: claim.out.Rev}, ttl, 5*time.Second)
	want("renew", []leaseRecord{claim, over, good}, porcupine.Ok)
	if good.out.Outcome != LeaseRefused {
		t.Fatalf("a stale renewal: %v, want it refused", good.out)
	}
	stale := leaseRecord{client: a.id, in: LeaseInput{Op: LeaseSwap, Key: "catch.renew", Value: "a3", Rev: claim.out.Rev}, call: r.now()}
	rev, err := put(a, "catch.renew", "a3")
	if err != nil {
		t.Fatal(err)
	}
	stale.ret, stale.out = r.now(), LeaseOutput{Outcome: LeaseOK, Rev: rev}
	want("renew by put", []leaseRecord{claim, over, stale}, porcupine.Illegal)
}

// TestLeaseModel pins the model's rules on short sequential histories.
func TestLeaseModel(t *testing.T) {
	ok := func(rev uint64) LeaseOutput { return LeaseOutput{Outcome: LeaseOK, Rev: rev} }
	read := func(v string, rev uint64) LeaseOutput { return LeaseOutput{Outcome: LeaseOK, Value: v, Rev: rev} }
	refused, absent, unknown := LeaseOutput{Outcome: LeaseRefused}, LeaseOutput{Outcome: LeaseAbsent}, LeaseOutput{Outcome: LeaseUnknown}
	create := func(v string) LeaseInput { return LeaseInput{Op: LeaseCreate, Key: "k", Value: v} }
	swap := func(v string, rev uint64) LeaseInput { return LeaseInput{Op: LeaseSwap, Key: "k", Value: v, Rev: rev} }
	del := func(rev uint64) LeaseInput { return LeaseInput{Op: LeaseDelete, Key: "k", Rev: rev} }
	get := LeaseInput{Op: LeaseGet, Key: "k"}
	type step struct {
		in  LeaseInput
		out LeaseOutput
	}
	for _, tc := range []struct {
		name  string
		steps []step
		legal bool
	}{
		{"claim renew release", []step{{create("a"), ok(1)}, {swap("a2", 1), ok(2)}, {get, read("a2", 2)}, {del(2), ok(3)}, {get, absent}}, true},
		{"second claim refused", []step{{create("a"), ok(1)}, {create("b"), refused}}, true},
		{"second claim wins", []step{{create("a"), ok(1)}, {create("b"), ok(2)}}, false},
		{"claim refused on a free key", []step{{create("a"), refused}}, false},
		{"stale renewal wins", []step{{create("a"), ok(1)}, {swap("b", 1), ok(2)}, {swap("a2", 1), ok(3)}}, false},
		{"revision goes back", []step{{create("a"), ok(5)}, {del(5), ok(6)}, {create("b"), ok(4)}}, false},
		{"read of an old value", []step{{create("a"), ok(1)}, {swap("b", 1), ok(2)}, {get, read("a", 1)}}, false},
		{"claim after release", []step{{create("a"), ok(1)}, {del(1), ok(2)}, {create("b"), ok(3)}}, true},
		// The marker may stand (a swap at it wins) or have expired (it
		// is refused), but once gone it does not come back.
		{"reclaim over the marker", []step{{create("a"), ok(1)}, {del(1), ok(2)}, {swap("a2", 2), ok(3)}}, true},
		{"marker expired", []step{{create("a"), ok(1)}, {del(1), ok(2)}, {swap("a2", 2), refused}, {create("b"), ok(3)}}, true},
		{"marker back", []step{{create("a"), ok(1)}, {del(1), ok(2)}, {swap("a2", 2), refused}, {swap("a3", 2), ok(3)}}, false},
		// An unknown write may have landed: a read pins it.
		{"unknown claim landed", []step{{create("a"), unknown}, {get, read("a", 7)}, {swap("a2", 7), ok(8)}}, true},
		{"unknown claim read twice", []step{{create("a"), unknown}, {get, read("a", 7)}, {get, read("a", 6)}}, false},
		{"unknown claim did not land", []step{{create("a"), unknown}, {create("b"), ok(2)}, {get, read("b", 2)}}, true},
	} {
		var ops []porcupine.Operation
		for i, s := range tc.steps {
			ret := int64(2*i + 1)
			if s.out.Outcome == LeaseUnknown {
				ret = 1000
			}
			ops = append(ops, porcupine.Operation{Input: s.in, Output: s.out, Call: int64(2 * i), Return: ret})
		}
		if got := porcupine.CheckOperations(LeaseModel, ops); got != tc.legal {
			t.Errorf("%s: linearizable %v, want %v", tc.name, got, tc.legal)
		}
	}
}
