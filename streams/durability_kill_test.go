package streams_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// TestDurabilityKillMeasure measures what acknowledged writes survive when
// every nats-server process of a deployment with lazy fsync (the default
// sync_interval, 2 minutes) is killed with SIGKILL while writes are in
// flight, then started again: one server with an R1 stream, three with an
// R3 stream. It builds nats-server from the module cache and runs real
// processes, so it is skipped unless LASH_DURABILITY_KILL=1:
//
//	LASH_DURABILITY_KILL=1 go test ./streams/ -run TestDurabilityKillMeasure -count=1 -v
//
// The kill comes seconds after the stream was made: before the servers'
// first sync (1-2 minutes after a store opens) and before the kernel writes
// back dirty pages (30 s here, vm.dirty_expire_centisecs), so what was
// acknowledged was in the page cache only. A SIGKILL keeps the page cache;
// a power loss or kernel crash would not, and this cannot produce those
// (docs/durability.md).
func TestDurabilityKillMeasure(t *testing.T) {
	if os.Getenv("LASH_DURABILITY_KILL") == "" {
		t.Skip("builds and kills nats-server processes: set LASH_DURABILITY_KILL=1")
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	build := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("R%d", n), func(t *testing.T) { measureKill(t, bin, n) })
	}
}

// killAccounts: a system user, to read the settings, and an account with
// JetStream.
const killAccounts = `
accounts {
  SYS { users: [{user: sys, password: sys}] }
  APP { jetstream: enabled, users: [{user: app, password: app}] }
}
system_account: SYS
`

type killServer struct {
	conf, log string
	cmd       *exec.Cmd
}

func (s *killServer) start(t *testing.T, bin string) {
	t.Helper()
	out, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "-c", s.conf)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	cmd := s.cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

func (s *killServer) kill() {
	_ = s.cmd.Process.Kill() // SIGKILL
	_ = s.cmd.Wait()
}

func measureKill(t *testing.T, bin string, n int) {
	dir := t.TempDir()
	ports := make([]int, 2*n)
	var held []net.Listener // until all are picked, so none twice
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range held {
		l.Close()
	}
	var routes, urls []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	servers := make([]*killServer, n)
	for i := range n {
		conf := fmt.Sprintf("server_name: k%d\nlisten: 127.0.0.1:%d\n", i, ports[i])
		// No sync_interval: nats-server's default.
		conf += fmt.Sprintf("jetstream { store_dir: %q }\n", filepath.Join(dir, strconv.Itoa(i)))
		if n > 1 {
			conf += fmt.Sprintf("cluster { name: kill, listen: 127.0.0.1:%d, routes: [%s] }\n", ports[n+i], strings.Join(routes, ", "))
		}
		conf += killAccounts
		s := &killServer{conf: filepath.Join(dir, fmt.Sprintf("k%d.conf", i)), log: filepath.Join(dir, fmt.Sprintf("k%d.log", i))}
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		servers[i] = s
	}
	for _, s := range servers {
		s.start(t, bin)
	}
	url := strings.Join(urls, ",")
	stream := jetstream.StreamConfig{Name: "KILL", Subjects: []string{"kill.>"}, Replicas: n, Storage: jetstream.FileStorage}
	nc, js := killConnect(t, url)
	waitKillStream(t, js, stream)

	// The servers say they are lazy, through the check lash-node runs.
	sys, err := nats.Connect(url, nats.UserInfo("sys", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	report := streams.ReadServerSync(context.Background(), sys)
	sys.Close()
	if len(report.Servers) != n || report.Verdict(n).Level != streams.SyncLazy {
		t.Fatalf("read settings %+v, want %d lazy servers", report, n)
	}
	t.Logf("settings: %s", report.Verdict(n).Servers)

	// Writers publish until target writes are acknowledged; then every
	// server is killed with writes in flight.
	const writers, target = 16, 20000
	var next, count atomic.Int64
	acked := make([][]int64, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for {
				id := next.Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := js.Publish(ctx, "kill.x", []byte(strconv.FormatInt(id, 10)))
				cancel()
				if err != nil {
					return
				}
				acked[w] = append(acked[w], id)
				count.Add(1)
			}
		})
	}
	for count.Load() < target {
		time.Sleep(time.Millisecond)
	}
	for _, s := range servers {
		s.kill()
	}
	elapsed := time.Since(start)
	wg.Wait()
	nc.Close()
	sent := next.Load()
	var all []int64
	for _, a := range acked {
		all = append(all, a...)
	}
	t.Logf("%d writes acknowledged in %s (%d attempted) before SIGKILL of %d server(s)", len(all), elapsed.Round(time.Millisecond), sent, n)

	for _, s := range servers {
		s.start(t, bin)
	}
	nc, js = killConnect(t, url)
	defer nc.Close()
	restarted := time.Now()
	st := waitKillStream(t, js, stream)
	back := time.Since(restarted)
	stored := readKillIDs(t, st)
	lost := 0
	for _, id := range all {
		if !stored[id] {
			lost++
		}
	}
	t.Logf("after restart (%s to the stream): %d messages stored; %d of %d acknowledged writes lost; %d stored writes were not acknowledged (in flight at the kill)",
		back.Round(time.Millisecond), len(stored), lost, len(all), len(stored)-(len(all)-lost))
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost to a SIGKILL", lost)
	}
}

func killConnect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var nc *nats.Conn
	testenv.WaitFor(t, 30*time.Second, func() error {
		var err error
		nc, err = nats.Connect(url, nats.UserInfo("app", "app"), nats.NoReconnect())
		return err
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// waitKillStream makes the stream, or waits until it is back with a leader.
func waitKillStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	var st jetstream.Stream
	testenv.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		st, err = js.CreateOrUpdateStream(ctx, cfg)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if cfg.Replicas > 1 && (info.Cluster == nil || info.Cluster.Leader == "") {
			return errors.New("no stream leader yet")
		}
		return nil
	})
	return st
}

// readKillIDs reads every message of the stream. Right after a restart the
// stream's leader may still move, taking an ordered consumer with it: a
// failed read starts again after the last message read.
func readKillIDs(t *testing.T, st jetstream.Stream) map[int64]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int64]bool{}
	var last uint64
	var failures []string
	for uint64(len(ids)) < info.State.Msgs {
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages; failures: %s", len(ids), info.State.Msgs, strings.Join(failures, "; "))
		}
		cfg := jetstream.OrderedConsumerConfig{}
		if last > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, last+1
		}
		c, err := st.OrderedConsumer(ctx, cfg)
		if err != nil {
			failures = append(failures, err.Error())
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for uint64(len(ids)) < info.State.Msgs {
			left := int(info.State.Msgs - uint64(len(ids)))
			batch, err := c.Fetch(min(left, 1000), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				failures = append(failures, err.Error())
				break
			}
			got := 0
			for m := range batch.Messages() {
				id, err := strconv.ParseInt(string(m.Data()), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				meta, err := m.Metadata()
				if err != nil {
					t.Fatal(err)
				}
				ids[id], last = true, meta.Sequence.Stream
				got++
			}
			if got == 0 {
				failures = append(failures, fmt.Sprintf("an empty batch: %v", batch.Error()))
				break
			}
		}
	}
	if len(failures) > 0 {
		t.Logf("reading back took %d new starts: %s", len(failures), strings.Join(failures, "; "))
	}
	return ids
}
