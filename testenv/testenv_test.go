package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lash-run/lash/testenv"
)

// wait is the deadline of conditions that take milliseconds on a quiet
// machine; the margin is for loaded ones.
const wait = 20 * time.Second

func TestRunJetStreamPublishAndRead(t *testing.T) {
	start := time.Now()
	s := testenv.RunJetStream(t)
	t.Logf("single server ready in %v", time.Since(start))

	js := newJetStream(t, s.Conn(t))
	ctx := t.Context()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	for i := range 3 {
		ack, err := js.Publish(ctx, fmt.Sprintf("orders.%d", i), []byte(fmt.Sprintf("order %d", i)))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Sequence != uint64(i+1) {
			t.Fatalf("publish %d: sequence %d, want %d", i, ack.Sequence, i+1)
		}
	}
	for i := range 3 {
		msg, err := stream.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("get %d: %v", i+1, err)
		}
		if want := fmt.Sprintf("order %d", i); msg.Subject != fmt.Sprintf("orders.%d", i) || string(msg.Data) != want {
			t.Fatalf("message %d: %s %q, want orders.%d %q", i+1, msg.Subject, msg.Data, i, want)
		}
	}

	// The stream lives on disk under StoreDir.
	if _, err := os.Stat(filepath.Join(s.StoreDir(), "jetstream", "$G", "streams", "ORDERS")); err != nil {
		t.Fatalf("stream files: %v", err)
	}
}

func TestRunJetStreamURLOverTCP(t *testing.T) {
	s := testenv.RunJetStream(t)
	if !strings.HasPrefix(s.URL(), "nats://127.0.0.1:") {
		t.Fatalf("URL() = %q, want nats://127.0.0.1:<port>", s.URL())
	}
	inProc := newJetStream(t, s.Conn(t))
	if _, err := inProc.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}

	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatalf("connect over TCP: %v", err)
	}
	defer nc.Close()
	if _, err := net.ResolveTCPAddr("tcp", nc.ConnectedAddr()); err != nil {
		t.Fatalf("connection is not over TCP: ConnectedAddr %q: %v", nc.ConnectedAddr(), err)
	}
	overTCP := newJetStream(t, nc)
	if _, err := overTCP.Publish(t.Context(), "s", []byte("hello")); err != nil {
		t.Fatalf("publish over TCP: %v", err)
	}
	stream, err := inProc.Stream(t.Context(), "S")
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	msg, err := stream.GetLastMsgForSubject(t.Context(), "s")
	if err != nil || string(msg.Data) != "hello" {
		t.Fatalf("read in-process after TCP publish: %v, %v", msg, err)
	}
}

func TestRunJetStreamOptions(t *testing.T) {
	s := testenv.RunJetStream(t, testenv.WithSyncAlways(), testenv.WithServerName("custom"))
	if got := s.NATS().Name(); got != "custom" || s.Name() != "custom" {
		t.Fatalf("server name %q (Name() %q), want custom", got, s.Name())
	}
	if !s.NATS().JetStreamConfig().SyncAlways {
		t.Fatal("SyncAlways is off")
	}
	if testenv.RunJetStream(t).NATS().JetStreamConfig().SyncAlways {
		t.Fatal("SyncAlways is on by default")
	}
}

// WithOptions secures a server with a password; Conn connects with it, and
// with the new one after a Reload, which closes a client holding the old
// one for good.
func TestWithOptionsAndReload(t *testing.T) {
	s := testenv.RunJetStream(t, testenv.WithOptions(func(o *server.Options) {
		o.Username, o.Password = "lash", "old"
	}))
	if nc, err := nats.Connect(s.URL()); err == nil {
		nc.Close()
		t.Fatal("connected without a password")
	}
	closed := make(chan error, 1)
	old, err := nats.Connect(s.URL(), nats.UserInfo("lash", "old"), nats.ReconnectWait(10*time.Millisecond),
		nats.MaxReconnects(-1), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.ClosedHandler(func(nc *nats.Conn) { closed <- nc.LastError() }))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := s.Conn(t).Publish("x", nil); err != nil {
		t.Fatal(err)
	}

	s.Reload(func(o *server.Options) { o.Password = "new" })
	select {
	case err := <-closed:
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("closed with %v, want an authorization violation", err)
		}
	case <-time.After(wait):
		t.Fatalf("a client with the old password still %s after %s", old.Status(), wait)
	}
	nc := s.Conn(t)
	if err := nc.Flush(); err != nil || !nc.IsConnected() {
		t.Fatalf("Conn after the reload: %s %v", nc.Status(), err)
	}
}

// WithLimits admits subjects longer than 4 KiB and payloads over 1 MiB,
// into JetStream too.
func TestWithLimits(t *testing.T) {
	s := testenv.RunJetStream(t, testenv.WithLimits(64<<10, 8<<20))
	nc := s.Conn(t)
	if got := nc.MaxPayload(); got != 8<<20 {
		t.Fatalf("max payload %d, want 8 MiB", got)
	}
	js := newJetStream(t, nc)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}}); err != nil {
		t.Fatal(err)
	}
	subject := "big." + strings.Repeat("s", 10<<10)
	data := make([]byte, 2<<20)
	ack, err := js.Publish(t.Context(), subject, data)
	if err != nil {
		t.Fatalf("publish of a 10 KiB subject and a 2 MiB payload: %v", err)
	}
	stream, err := js.Stream(t.Context(), "BIG")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetMsg(t.Context(), ack.Sequence)
	if err != nil || msg.Subject != subject || len(msg.Data) != len(data) {
		t.Fatalf("read back: %v", err)
	}
	// The defaults refuse both: the payload in the client, the subject by
	// closing the connection for good.
	small := testenv.RunJetStream(t)
	if err := small.Conn(t).Publish("x", data); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("2 MiB with the default limit: %v", err)
	}
	closed := make(chan error, 1)
	long, err := nats.Connect(small.URL(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.ClosedHandler(func(nc *nats.Conn) { closed <- nc.LastError() }))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	if err := long.Publish(subject, nil); err != nil {
		t.Fatal(err)
	}
	_ = long.Flush() // the server's answer closes the connection
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "maximum control line exceeded") {
			t.Errorf("closed with %v, want maximum control line exceeded", err)
		}
	case <-time.After(wait):
		t.Fatalf("a 10 KiB subject with the default limit: connection still %s", long.Status())
	}
}

func TestRunJetStreamStopsAtCleanup(t *testing.T) {
	var s *testenv.Server
	var ns *server.Server
	t.Run("inner", func(t *testing.T) {
		s = testenv.RunJetStream(t)
		ns = s.NATS()
		s.Conn(t)
	})
	if ns.Running() {
		t.Fatal("server still running after the test that started it ended")
	}
	if s.NATS() != nil {
		t.Fatal("NATS() not nil after shutdown")
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL(), "nats://"), time.Second); err == nil {
		c.Close()
		t.Fatal("client port still accepts connections")
	}
}

func TestWaitFor(t *testing.T) {
	calls := 0
	testenv.WaitFor(t, wait, func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}

	ft := &fatalTB{TB: t}
	start := time.Now()
	calls = 0
	testenv.WaitFor(ft, 30*time.Millisecond, func() error {
		calls++
		return fmt.Errorf("still not ready (call %d)", calls)
	})
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("gave up after %v, before the 30ms deadline", took)
	}
	if want := fmt.Sprintf("still not ready (call %d)", calls); !strings.Contains(ft.msg, want) {
		t.Fatalf("Fatalf message %q does not contain the last error %q", ft.msg, want)
	}
	if calls < 3 {
		t.Fatalf("cond called only %d times in 30ms", calls)
	}
}

// fatalTB records Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestClusterForms(t *testing.T) {
	start := time.Now()
	c := testenv.RunCluster(t, 3)
	t.Logf("3-node cluster whole and current in %v", time.Since(start))

	servers := c.Servers()
	if len(servers) != 3 {
		t.Fatalf("%d servers, want 3", len(servers))
	}
	names := map[string]bool{}
	for _, s := range servers {
		names[s.Name()] = true
		if !s.NATS().JetStreamIsClustered() {
			t.Fatalf("%s: JetStream not clustered", s.Name())
		}
		if got := s.NATS().ClusterName(); got != testenv.ClusterName {
			t.Fatalf("%s: cluster name %q", s.Name(), got)
		}
	}
	if len(names) != 3 {
		t.Fatalf("server names not distinct: %v", names)
	}
	if leader := c.WaitForMetaLeader(t); !leader.NATS().JetStreamIsLeader() {
		t.Fatalf("WaitForMetaLeader returned %s, which is not the leader", leader.Name())
	}
	// An R3 stream can be placed at once: every peer is known.
	js := newJetStream(t, c.Conn(t))
	info := createR3(t, js)
	if len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream replicas %+v, want 2 besides the leader", info.Cluster.Replicas)
	}
}

func TestClusterStopFollower(t *testing.T) {
	c := testenv.RunCluster(t, 3)
	js := newJetStream(t, c.Conn(t))
	createR3(t, js)
	publishN(t, js, 0, 100)

	leader := streamLeader(t, js)
	i := indexOf(t, c, func(s *testenv.Server) bool { return s.Name() != leader })
	stopPublishRestart(t, c, js, i, 100, 150)
}

func TestClusterStopStreamLeader(t *testing.T) {
	c := testenv.RunCluster(t, 3)
	js := newJetStream(t, c.Conn(t))
	createR3(t, js)
	publishN(t, js, 0, 100)

	leader := streamLeader(t, js)
	i := indexOf(t, c, func(s *testenv.Server) bool { return s.Name() == leader })
	stopPublishRestart(t, c, js, i, 100, 150)

	// The stream leader, wherever it is now, sees the old one back as a
	// current replica.
	testenv.WaitFor(t, wait, func() error {
		info, err := leaderInfo(t, js)
		if err != nil {
			return err
		}
		if len(info.Cluster.Replicas) != 2 {
			return fmt.Errorf("leader %s, replicas %+v", info.Cluster.Leader, info.Cluster.Replicas)
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("leader %s: replica %s current %v offline %v", info.Cluster.Leader, r.Name, r.Current, r.Offline)
			}
		}
		return nil
	})
}

func TestClusterStopMetaLeader(t *testing.T) {
	c := testenv.RunCluster(t, 3)
	old := c.WaitForMetaLeader(t)
	i := indexOf(t, c, func(s *testenv.Server) bool { return s == old })
	c.StopServer(i)
	if leader := c.WaitForMetaLeader(t); leader == old {
		t.Fatalf("stopped server %s is still the meta leader", old.Name())
	}
	c.RestartServer(i)
	// The whole cluster still places R3 streams.
	createR3(t, newJetStream(t, c.Conn(t)))
}

// stopPublishRestart stops server i of c, publishes messages [from, to)
// through js, restarts the server, and checks that every server, the
// restarted one included, holds messages [0, to) in order.
func stopPublishRestart(t *testing.T, c *testenv.Cluster, js jetstream.JetStream, i, from, to int) {
	t.Helper()
	stopped := c.Servers()[i]
	start := time.Now()
	c.StopServer(i)
	t.Logf("stopped %s in %v", stopped.Name(), time.Since(start))
	if stopped.NATS() != nil {
		t.Fatal("NATS() not nil after StopServer")
	}

	start = time.Now()
	publishN(t, js, from, to)
	t.Logf("published %d messages with %s down in %v", to-from, stopped.Name(), time.Since(start))

	start = time.Now()
	c.RestartServer(i)
	t.Logf("restarted %s, cluster whole and current in %v", stopped.Name(), time.Since(start))

	// The restarted server's own copy of the stream catches up.
	testenv.WaitFor(t, wait, func() error { return hasMsgs(stopped, to) })
	for _, s := range c.Servers() {
		if err := hasMsgs(s, to); err != nil {
			t.Fatal(err)
		}
	}
	// An in-process connection to the restarted server reads it all back.
	checkContents(t, newJetStream(t, stopped.Conn(t)), to)
}

const streamName = "EVENTS"

func createR3(t *testing.T, js jetstream.JetStream) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     streamName,
		Subjects: []string{"events.>"},
		Replicas: 3,
	})
	if err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	return stream.CachedInfo()
}

// streamLeader returns the name of the server that leads the stream now.
func streamLeader(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	var leader string
	testenv.WaitFor(t, wait, func() error {
		info, err := leaderInfo(t, js)
		if err == nil {
			leader = info.Cluster.Leader
		}
		return err
	})
	return leader
}

// leaderInfo asks once for the stream's info, which its leader answers, and
// fails if the stream has no leader.
func leaderInfo(t *testing.T, js jetstream.JetStream) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, err
	}
	info := stream.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, errors.New("stream has no leader")
	}
	return info, nil
}

// publishN publishes messages [from, to), each until it is acknowledged: a
// publish can time out while a server is down and leaders move. The message
// id makes a retry of a publish that landed a duplicate the stream ignores.
func publishN(t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	for n := from; n < to; n++ {
		testenv.WaitFor(t, wait, func() error {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			ack, err := js.Publish(ctx, fmt.Sprintf("events.%d", n), payload(n), jetstream.WithMsgID(fmt.Sprint(n)))
			if err != nil {
				return fmt.Errorf("publish %d: %w", n, err)
			}
			if ack.Sequence != uint64(n+1) {
				t.Fatalf("publish %d: sequence %d, want %d", n, ack.Sequence, n+1)
			}
			return nil
		})
	}
}

func payload(n int) []byte { return []byte(fmt.Sprintf("event %d", n)) }

// hasMsgs reports whether the stream on server s itself, read from its
// JetStream monitoring state, holds exactly msgs messages, and is current.
func hasMsgs(s *testenv.Server, msgs int) error {
	ns := s.NATS()
	if ns == nil {
		return fmt.Errorf("%s is stopped", s.Name())
	}
	jsz, err := ns.Jsz(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	for _, acc := range jsz.AccountDetails {
		for _, st := range acc.Streams {
			if st.Name != streamName {
				continue
			}
			if st.State.Msgs != uint64(msgs) || st.State.LastSeq != uint64(msgs) {
				return fmt.Errorf("%s: stream has %d messages up to sequence %d, want %d", s.Name(), st.State.Msgs, st.State.LastSeq, msgs)
			}
			if !ns.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, streamName) {
				return fmt.Errorf("%s: stream not current", s.Name())
			}
			return nil
		}
	}
	return fmt.Errorf("%s does not host stream %s", s.Name(), streamName)
}

// checkContents reads the stream message by message through js and checks
// it holds messages [0, msgs) in order. A read that fails is retried: right
// after a restart, stream and consumer leaders may still be moving, and
// requests can time out or find no responders.
func checkContents(t *testing.T, js jetstream.JetStream, msgs int) {
	t.Helper()
	next := 0
	testenv.WaitFor(t, wait, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		stream, err := js.Stream(ctx, streamName)
		if err != nil {
			return err
		}
		for ; next < msgs; next++ {
			msg, err := stream.GetMsg(ctx, uint64(next+1))
			if err != nil {
				return fmt.Errorf("get %d: %w", next+1, err)
			}
			if msg.Subject != fmt.Sprintf("events.%d", next) || string(msg.Data) != string(payload(next)) {
				t.Fatalf("message %d: %s %q", next+1, msg.Subject, msg.Data)
			}
		}
		return nil
	})
}

func indexOf(t *testing.T, c *testenv.Cluster, pred func(*testenv.Server) bool) int {
	t.Helper()
	for i, s := range c.Servers() {
		if pred(s) {
			return i
		}
	}
	t.Fatal("no such server")
	return -1
}

func newJetStream(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}
