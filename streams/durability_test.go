package streams_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// durabilityAccounts configures a system account whose user may read every
// server's settings and exports them, an account that imports them, one
// that does not, and a user of the importing account refused $SYS.
const durabilityAccounts = `
accounts {
  SYS { users: [{user: sys, password: sys}]
        exports: [{service: "$SYS.REQ.SERVER.PING.VARZ", response_type: stream}] }
  READER { jetstream: enabled
           users: [{user: reader, password: reader},
                   {user: denied, password: denied, permissions: {publish: {deny: ["$SYS.>"]}}}]
           imports: [{service: {account: SYS, subject: "$SYS.REQ.SERVER.PING.VARZ"}}] }
  PLAIN { jetstream: enabled, users: [{user: plain, password: plain}] }
}
system_account: SYS
`

// withDurabilityAccounts gives every server the accounts above.
func withDurabilityAccounts(t *testing.T) testenv.Option {
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, []byte(durabilityAccounts), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.WithOptions(func(o *server.Options) {
		// Parsed for each start: a server takes its accounts for its own.
		parsed, err := server.ProcessConfigFile(path)
		if err != nil {
			panic(err)
		}
		o.Accounts, o.Users, o.SystemAccount = parsed.Accounts, parsed.Users, parsed.SystemAccount
	})
}

// readSync reads the settings as user (its password is its name) over TCP.
func readSync(t *testing.T, url, user string) streams.SyncReport {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, user), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return streams.ReadServerSync(ctx, nc)
}

func TestDurabilityReadsOneServer(t *testing.T) {
	lazy := testenv.RunJetStream(t, withDurabilityAccounts(t), testenv.WithServerName("lazy"))
	always := testenv.RunJetStream(t, withDurabilityAccounts(t), testenv.WithServerName("always"), testenv.WithSyncAlways())

	for _, user := range []string{"sys", "reader"} {
		r := readSync(t, lazy.URL(), user)
		want := []streams.ServerSync{{Server: "lazy", Interval: 2 * time.Minute}}
		if len(r.Servers) != 1 || r.Servers[0] != want[0] || r.Unreadable != "" {
			t.Fatalf("%s on a lazy server: %+v, want %+v", user, r, want)
		}
		if v := r.Verdict(1); v.Level != streams.SyncLazy || !strings.Contains(v.Risk, "last 2m0s") {
			t.Errorf("%s on a lazy server: %+v", user, v)
		}
		r = readSync(t, always.URL(), user)
		if len(r.Servers) != 1 || !r.Servers[0].Always || r.Servers[0].Server != "always" {
			t.Fatalf("%s on a server that syncs always: %+v", user, r)
		}
		if v := r.Verdict(1); v.Level != streams.SyncSafe {
			t.Errorf("%s on a server that syncs always: %+v", user, v)
		}
	}

	// Users who may not ask learn that at once, not at the deadline.
	for user, why := range map[string]string{"plain": "no responders", "denied": "may not publish"} {
		start := time.Now()
		r := readSync(t, lazy.URL(), user)
		if len(r.Servers) != 0 || !strings.Contains(r.Unreadable, why) {
			t.Fatalf("%s: %+v, want unreadable with %q", user, r, why)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: the answer took %s", user, d)
		}
		if v := r.Verdict(1); v.Level != streams.SyncUnknown || !strings.Contains(v.Message, "sync_interval: always") {
			t.Errorf("%s: %+v", user, v)
		}
	}
}

// In a cluster every server answers; one that acknowledges before fsync is
// named, and one that is down is counted as missing.
func TestDurabilityReadsCluster(t *testing.T) {
	c := testenv.RunCluster(t, 3, withDurabilityAccounts(t), testenv.WithSyncAlways(), testenv.WithOptions(func(o *server.Options) {
		if o.ServerName == "lash-1" {
			o.SyncAlways, o.SyncInterval = false, 30*time.Second
		}
	}))
	start := time.Now()
	r := readSync(t, c.Servers()[0].URL(), "reader")
	t.Logf("three answers in %s", time.Since(start).Round(time.Millisecond))
	want := []streams.ServerSync{{Server: "lash-0", Always: true, Interval: 2 * time.Minute},
		{Server: "lash-1", Interval: 30 * time.Second}, {Server: "lash-2", Always: true, Interval: 2 * time.Minute}}
	if len(r.Servers) != 3 || r.ClusterSize != 3 {
		t.Fatalf("read %+v, want %+v in a cluster of 3", r, want)
	}
	for i := range want {
		if r.Servers[i] != want[i] {
			t.Fatalf("read %+v, want %+v", r.Servers, want)
		}
	}
	v := r.Verdict(3)
	if v.Level != streams.SyncLazy || !strings.Contains(v.Message, "server lash-1 acknowledges") ||
		!strings.Contains(v.Risk, "with 3 replicas") || !strings.Contains(v.Risk, "within 30s") ||
		v.Servers != "lash-0: always; lash-1: every 30s; lash-2: always" {
		t.Errorf("verdict %+v", v)
	}

	c.StopServer(1)
	r = readSync(t, c.Servers()[0].URL(), "reader")
	if len(r.Servers) != 2 || r.ClusterSize != 3 {
		t.Fatalf("with lash-1 down: %+v", r)
	}
	if v := r.Verdict(3); v.Level != streams.SyncUnknown || !strings.Contains(v.Message, "2 of 3") {
		t.Errorf("verdict with lash-1 down: %+v", v)
	}
}

func TestDurabilityVerdict(t *testing.T) {
	always := func(n string) streams.ServerSync {
		return streams.ServerSync{Server: n, Always: true, Interval: 2 * time.Minute}
	}
	lazy := func(n string, d time.Duration) streams.ServerSync { return streams.ServerSync{Server: n, Interval: d} }
	for _, tc := range []struct {
		name     string
		report   streams.SyncReport
		replicas int
		level    streams.SyncLevel
		has      []string // in Message, Servers or Risk
	}{
		{"one server always", streams.SyncReport{Servers: []streams.ServerSync{always("n")}}, 1, streams.SyncSafe,
			[]string{"every NATS server fsyncs", "n: always"}},
		{"cluster always", streams.SyncReport{Servers: []streams.ServerSync{always("a"), always("b"), always("c")}, ClusterSize: 3}, 3,
			streams.SyncSafe, []string{"a: always; b: always; c: always"}},
		{"one server lazy", streams.SyncReport{Servers: []streams.ServerSync{lazy("n", 2*time.Minute)}}, 1, streams.SyncLazy,
			[]string{"server n acknowledges", "sync_interval: always", "with 1 replica", "last 2m0s", "n: every 2m0s"}},
		{"lazy with no interval reported", streams.SyncReport{Servers: []streams.ServerSync{lazy("n", 0)}}, 0, streams.SyncLazy,
			[]string{"with 1 replica", "2m0s (the default)"}},
		{"two lazy of three", streams.SyncReport{Servers: []streams.ServerSync{lazy("a", time.Minute), always("b"), lazy("c", 10*time.Second)}, ClusterSize: 3},
			3, streams.SyncLazy, []string{"servers a, c acknowledge", "with 3 replicas", "majority", "within 1m0s", "Jepsen"}},
		{"lazy and one missing", streams.SyncReport{Servers: []streams.ServerSync{lazy("a", time.Minute), always("b")}, ClusterSize: 3},
			3, streams.SyncLazy, []string{"server a acknowledges", "1 of 3 servers did not answer"}},
		{"always but one missing", streams.SyncReport{Servers: []streams.ServerSync{always("a"), always("b")}, ClusterSize: 3},
			3, streams.SyncUnknown, []string{"2 of 3 NATS servers answered", "the others' setting is unknown"}},
		{"unreadable", streams.SyncReport{Unreadable: "no responders on $SYS.REQ.SERVER.PING.VARZ"}, 3, streams.SyncUnknown,
			[]string{"cannot read", "sync_interval: always", "no responders"}},
		{"nothing at all", streams.SyncReport{}, 1, streams.SyncUnknown, []string{"cannot read", "no server answered"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.report.Verdict(tc.replicas)
			if v != tc.report.Verdict(tc.replicas) {
				t.Fatal("two verdicts on one report differ")
			}
			if v.Level != tc.level {
				t.Errorf("level %d, want %d: %+v", v.Level, tc.level, v)
			}
			all := v.Message + "\n" + v.Servers + "\n" + v.Risk
			for _, s := range tc.has {
				if !strings.Contains(all, s) {
					t.Errorf("%q missing from %+v", s, v)
				}
			}
		})
	}
}
