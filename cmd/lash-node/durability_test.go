package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats-server/v2/server"
)

// A system account exports the servers' settings to READER; PLAIN cannot
// ask, and a user of READER is refused $SYS by its permissions.
const checkAccounts = `
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

func withCheckAccounts(t *testing.T) testenv.Option {
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, []byte(checkAccounts), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.WithOptions(func(o *server.Options) {
		parsed, err := server.ProcessConfigFile(path)
		if err != nil {
			panic(err)
		}
		o.Accounts, o.Users, o.SystemAccount = parsed.Accounts, parsed.Users, parsed.SystemAccount
	})
}

// The node logs one line about the joined servers' fsync: a warning that
// names a lazy server, an info line when every server syncs, and an info
// line when its credentials cannot read the setting, with nothing else
// logged (a refused publish included).
func TestCheckDurabilityLogs(t *testing.T) {
	lazy := testenv.RunJetStream(t, withCheckAccounts(t), testenv.WithServerName("lazy"))
	always := testenv.RunJetStream(t, withCheckAccounts(t), testenv.WithServerName("always"), testenv.WithSyncAlways())
	for _, tc := range []struct {
		url, user string
		level     string
		has       []string
	}{
		{lazy.URL(), "reader", "WARN", []string{"NATS server lazy acknowledges", "sync_interval: always", `servers="lazy: every 2m0s"`, "with 1 replica"}},
		{always.URL(), "reader", "INFO", []string{"every NATS server fsyncs", `servers="always: always"`}},
		{lazy.URL(), "plain", "INFO", []string{"cannot read", "no responders"}},
		{lazy.URL(), "denied", "INFO", []string{"cannot read", "may not publish"}},
		{"nats://127.0.0.1:1", "reader", "INFO", []string{"cannot read", "connect to NATS"}},
	} {
		var buf testenv.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		checkDurability(&cli.Conn{URL: tc.url, User: tc.user, Password: tc.user, Replicas: 1}, log)
		out := strings.TrimSpace(buf.String())
		if strings.Count(out, "\n") != 0 || !strings.Contains(out, "level="+tc.level) {
			t.Errorf("%s at %s: want one line at %s, got:\n%s", tc.user, tc.url, tc.level, out)
		}
		for _, s := range tc.has {
			if !strings.Contains(out, s) {
				t.Errorf("%s at %s: %q missing from:\n%s", tc.user, tc.url, s, out)
			}
		}
	}
}
