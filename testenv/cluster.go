package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ClusterName is the nats cluster name of every Cluster.
const ClusterName = "lash-test"

const (
	// readyTimeout bounds how long a cluster may take to become whole and
	// current. It takes well under a second; the margin is for loaded
	// machines and the race detector.
	readyTimeout = 30 * time.Second
	// startAttempts is how often RunCluster starts a new cluster from
	// scratch, on new ports and in empty directories, when a server cannot
	// listen on the ports it was given (another process took them between
	// picking and listening) or when the first meta leader election fails.
	startAttempts = 5
	// leaderDeadline is how long RunCluster waits for the first meta leader
	// before it starts over (except on its last attempt, which waits
	// readyTimeout). A new cluster elects one 0.1-0.8 s after its servers
	// start, but only with the votes of all servers: when two servers
	// campaign in the same term, or one campaigns before all are connected
	// (then the late one campaigns too), nobody wins and nats-server waits
	// for its election timeout of 4-9 s before trying again. Under the race
	// detector on a loaded two-core machine that happens to one start in
	// four or so. RunCluster starts over as soon as splitVote sees it; the
	// deadline is the fallback for anything else, long enough for a slow
	// but sound election.
	leaderDeadline = 3 * time.Second
	// reconnectWait is the pause of a Cluster.Conn between two rounds of
	// reconnection attempts.
	reconnectWait = 50 * time.Millisecond
)

// Cluster is a JetStream cluster of embedded nats-servers in the test
// process, started by RunCluster. Call its methods from the goroutine running
// the test that created it.
type Cluster struct {
	t       testing.TB
	servers []*Server
}

// RunCluster starts a JetStream cluster of n servers (n at least 2) in the
// test process and returns once it is whole and current (see the package
// documentation). Each server has its own name, store directory under
// t.TempDir(), client port and cluster port on 127.0.0.1, and routes to all
// the servers. The ports are chosen before the servers start, so a server
// restarts on the same ones. Everything is shut down at t.Cleanup.
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 2 {
		t.Fatalf("testenv: RunCluster needs at least 2 servers, got %d (use RunJetStream for one)", n)
	}
	cfg := newConfig(opts)
	// TempDir before Cleanup: cleanups run last-in first-out, so the servers
	// stop before their directories are removed.
	root := t.TempDir()
	c := &Cluster{t: t}
	t.Cleanup(c.stopAll)

	start := time.Now()
	var failed []string
	for attempt := 1; ; attempt++ {
		last := attempt == startAttempts
		err := c.start(cfg, n, root, !last)
		if err == nil {
			break
		}
		failed = append(failed, fmt.Sprintf("  attempt %d: %v", attempt, err))
		if last {
			t.Fatalf("testenv: starting a cluster of %d:\n%s", n, strings.Join(failed, "\n"))
		}
	}
	if len(failed) > 0 {
		t.Logf("testenv: cluster of %d started after %v and %d failed attempts:\n%s",
			n, time.Since(start).Round(time.Millisecond), len(failed), strings.Join(failed, "\n"))
	}
	c.waitCurrent()
	return c
}

// start creates and starts n servers on newly chosen ports. On failure it
// stops the servers it started.
//
// The servers start one after the other: starting them all at once makes
// their first elections collide more often (see leaderDeadline). If
// quickLeader is set, start also fails when no meta leader is elected within
// leaderDeadline, so that RunCluster can try again.
func (c *Cluster) start(cfg config, n int, root string, quickLeader bool) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	clientPorts, clusterPorts := ports[:n], ports[n:]

	routes := make([]string, n)
	for i, p := range clusterPorts {
		routes[i] = "nats-route://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}

	c.servers = make([]*Server, n)
	for i := range n {
		s := &Server{
			t:        c.t,
			name:     cfg.name + "-" + strconv.Itoa(i),
			storeDir: filepath.Join(root, strconv.Itoa(i)),
		}
		// A failed attempt may have left files behind.
		if err := os.RemoveAll(s.storeDir); err != nil {
			return err
		}
		clientPort, clusterPort := clientPorts[i], clusterPorts[i]
		s.options = func() *server.Options {
			o := baseOptions(cfg, s.name, s.storeDir, clientPort)
			o.Cluster = server.ClusterOpts{Name: ClusterName, Host: "127.0.0.1", Port: clusterPort}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
			return cfg.apply(o)
		}
		c.servers[i] = s
	}
	for _, s := range c.servers {
		if err := s.start(); err != nil {
			c.stopAll()
			return err
		}
	}
	if quickLeader {
		err := poll(leaderDeadline, func() error {
			_, err := metaLeader(c.running())
			if err != nil {
				if split := splitVote(c.running()); split != nil {
					return giveUp(split)
				}
			}
			return err
		})
		if err != nil {
			c.stopAll()
			return fmt.Errorf("first meta leader election: %w", err)
		}
	}
	return nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		// Held open until all are found, so that none is returned twice.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// stopAll stops every running server, concurrently.
func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, s := range c.servers {
		wg.Go(s.stop)
	}
	wg.Wait()
}

// Servers returns the cluster's servers, indexed as in StopServer and
// RestartServer. A stopped server stays in the list, with a nil NATS().
func (c *Cluster) Servers() []*Server { return slices.Clone(c.servers) }

// URL returns the client URLs of all servers, separated by commas, as
// nats.Connect and the nats command line accept them.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Conn returns a new connection over TCP that knows every server's client
// URL, closed at t.Cleanup. When its server stops it reconnects to another,
// retrying without limit every 50 milliseconds; requests sent meanwhile are
// buffered, so a caller sees at most a timeout or a no-responders error
// while JetStream elects new leaders.
func (c *Cluster) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.URL(),
		nats.Name("testenv "+ClusterName),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(reconnectWait/5, reconnectWait/5),
	)
	if err != nil {
		t.Fatalf("testenv: connecting to cluster %s: %v", c.URL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// StopServer shuts server i down and waits until it has. It does not wait
// for the other servers to elect new leaders: use WaitForMetaLeader, or
// retry the operation that needs a leader.
func (c *Cluster) StopServer(i int) {
	c.t.Helper()
	s := c.server(i)
	if s.NATS() == nil {
		c.t.Fatalf("testenv: StopServer(%d): %s is already stopped", i, s.name)
	}
	s.stop()
}

// RestartServer starts the stopped server i again with the same name, store
// directory, ports and routes, and waits until the cluster is whole and
// current again: among others, every stream the server hosts has caught up.
func (c *Cluster) RestartServer(i int) {
	c.t.Helper()
	s := c.server(i)
	if s.NATS() != nil {
		c.t.Fatalf("testenv: RestartServer(%d): %s is running", i, s.name)
	}
	if err := s.start(); err != nil {
		c.t.Fatalf("testenv: RestartServer(%d): %v", i, err)
	}
	c.waitCurrent()
}

// slowReady is how long the cluster may take to become whole and current
// before waitCurrent logs what it waited for. A restart normally takes 1-3 s:
// the restarted server waits for the leaders' heartbeats, sent every second.
const slowReady = 4 * time.Second

// waitCurrent waits until the cluster is whole and current. If that is slow
// it logs each reason it waited for and when that reason first appeared.
func (c *Cluster) waitCurrent() {
	c.t.Helper()
	start := time.Now()
	var log []string
	last := ""
	defer func() {
		if took := time.Since(start); took > slowReady {
			c.t.Logf("testenv: cluster took %v to become whole and current:\n%s", took.Round(time.Millisecond), strings.Join(log, "\n"))
		}
	}()
	WaitFor(c.t, readyTimeout, func() error {
		err := c.current()
		if reason := fmt.Sprint(err); reason != last {
			last = reason
			log = append(log, fmt.Sprintf("  %8v %s", time.Since(start).Round(time.Millisecond), reason))
		}
		return err
	})
}

// WaitForMetaLeader waits until the running servers agree on one JetStream
// meta leader, and returns it. With fewer than a quorum of servers running
// it fails the test at its deadline.
func (c *Cluster) WaitForMetaLeader(t testing.TB) *Server {
	t.Helper()
	var leader live
	WaitFor(t, readyTimeout, func() error {
		var err error
		leader, err = metaLeader(c.running())
		return err
	})
	return leader.s
}

func (c *Cluster) server(i int) *Server {
	c.t.Helper()
	if i < 0 || i >= len(c.servers) {
		c.t.Fatalf("testenv: no server %d in a cluster of %d", i, len(c.servers))
	}
	return c.servers[i]
}

// live is a running server and its nats-server, read once.
type live struct {
	s  *Server
	ns *server.Server
}

func (c *Cluster) running() []live {
	var r []live
	for _, s := range c.servers {
		if ns := s.NATS(); ns != nil {
			r = append(r, live{s, ns})
		}
	}
	return r
}

// current reports why the cluster is not whole and current, or nil if it
// is. The running servers count as the whole cluster.
func (c *Cluster) current() error {
	running := c.running()
	leader, err := metaLeader(running)
	if err != nil {
		return err
	}
	// The leader counts a peer only once it has the peer's JetStream
	// statistics; until then it cannot place replicas on it.
	peers := leader.ns.JetStreamClusterPeers()
	for _, m := range running {
		if !slices.Contains(peers, m.s.name) {
			return fmt.Errorf("meta leader %s does not count %s among its peers %v", leader.s.name, m.s.name, peers)
		}
	}
	for _, m := range running {
		if !m.ns.JetStreamIsCurrent() {
			return fmt.Errorf("%s: meta group not current", m.s.name)
		}
		if err := streamsCurrent(m); err != nil {
			return err
		}
	}
	return nil
}

// metaLeader returns the one meta leader all running servers report.
func metaLeader(running []live) (live, error) {
	if len(running) == 0 {
		return live{}, errors.New("no server running")
	}
	var leader live
	for _, m := range running {
		if !m.ns.Running() || !m.ns.JetStreamEnabled() {
			return live{}, fmt.Errorf("%s: not running with JetStream", m.s.name)
		}
		if m.ns.JetStreamIsLeader() {
			if leader.ns != nil {
				return live{}, fmt.Errorf("two meta leaders: %s and %s", leader.s.name, m.s.name)
			}
			leader = m
		}
	}
	if leader.ns == nil {
		return live{}, errors.New("no meta leader")
	}
	for _, m := range running {
		jsz, err := m.ns.Jsz(nil)
		if err != nil {
			return live{}, fmt.Errorf("%s: %w", m.s.name, err)
		}
		if jsz.Meta == nil || jsz.Meta.Leader != leader.s.name {
			var seen string
			if jsz.Meta != nil {
				seen = jsz.Meta.Leader
			}
			return live{}, fmt.Errorf("%s sees meta leader %q, not %s", m.s.name, seen, leader.s.name)
		}
	}
	return leader, nil
}

// streamsCurrent reports the first stream hosted on m that has not caught
// up with its group.
func streamsCurrent(m live) error {
	jsz, err := m.ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return fmt.Errorf("%s: %w", m.s.name, err)
	}
	for _, acc := range jsz.AccountDetails {
		for _, st := range acc.Streams {
			if !m.ns.JetStreamIsStreamCurrent(acc.Id, st.Name) {
				return fmt.Errorf("%s: stream %s > %s not current", m.s.name, acc.Id, st.Name)
			}
		}
	}
	return nil
}

// metaGroup is the name nats-server gives the Raft group of the JetStream
// meta layer.
const metaGroup = "_meta_"

// splitVote reports a first meta leader election that has failed for sure:
// with empty logs a candidate needs the votes of all servers, so two servers
// that voted for themselves in the same term both lose it.
func splitVote(running []live) error {
	selfVoted := map[uint64]string{} // term -> name of a server that voted for itself
	for _, m := range running {
		rz := m.ns.Raftz(&server.RaftzOptions{GroupFilter: metaGroup})
		if rz == nil {
			continue
		}
		for _, groups := range *rz {
			g, ok := groups[metaGroup]
			if !ok || g.Leader != "" || g.Term == 0 || g.Vote != g.ID {
				continue
			}
			if other, ok := selfVoted[g.Term]; ok {
				return fmt.Errorf("split vote: %s and %s both voted for themselves in term %d; nats-server would wait 4-9 s for a new election", other, m.s.name, g.Term)
			}
			selfVoted[g.Term] = m.s.name
		}
	}
	return nil
}
