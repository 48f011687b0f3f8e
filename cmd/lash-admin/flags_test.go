package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run runs lash-admin in this process; the cases here end before it
// connects anywhere.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--nats", "nats://x:1", "--help"}} {
		code, out, errOut := run(t, args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "Usage: lash-admin [global flags] COMMAND") {
			t.Fatalf("%q: %d %q %q", args, code, out, errOut)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "\n  "+strings.TrimSpace(c.name+" "+c.args)+" ") {
				t.Errorf("%q does not list %s", args, c.name)
			}
		}
		for _, f := range []string{"--nats URL", "LASH_NATS or NATS_URL", "--prefix", "--replicas", "--cache", "--config", "--json"} {
			if !strings.Contains(out, f) {
				t.Errorf("%q does not mention %s", args, f)
			}
		}
	}
	for _, c := range commands() {
		for _, args := range [][]string{append(strings.Fields(c.name), "-h"), append([]string{"help"}, strings.Fields(c.name)...)} {
			code, out, errOut := run(t, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: lash-admin "+c.name) || !strings.Contains(out, "--json") {
				t.Errorf("%q: %d %q %q", args, code, out, errOut)
			}
		}
	}
	// A group's help lists its subcommands, with their summaries and how to
	// get each one's help.
	for _, group := range []string{"sessions", "leases", "nodes", "quarantine"} {
		for _, args := range [][]string{{"help", group}, {group, "-h"}, {group, "--help"}, {group, "-help"}, {"--nats", "nats://x:1", group, "--json", "-h"}} {
			code, out, errOut := run(t, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: lash-admin "+group+" SUBCOMMAND") ||
				!strings.Contains(out, "lash-admin "+group+" SUBCOMMAND -h") {
				t.Errorf("%q: %d %q %q", args, code, out, errOut)
				continue
			}
			n := 0
			for _, c := range commands() {
				g, sub, _ := strings.Cut(c.name, " ")
				if g != group {
					continue
				}
				n++
				if !strings.Contains(out, "\n  "+strings.TrimSpace(sub+" "+c.args)+"  ") || !strings.Contains(out, c.summary+"\n") {
					t.Errorf("%q does not list %s with its summary:\n%s", args, c.name, out)
				}
			}
			if n == 0 {
				t.Errorf("group %s has no commands", group)
			}
		}
	}
	if _, out, _ := run(t, "--help"); !strings.Contains(out, "(sessions, processes, triggers, agents, programs, waits, leases, nodes, storage, quarantine)") {
		t.Errorf("--help does not name the groups:\n%s", out)
	}
	if _, out, _ := run(t, "verify", "-h"); !strings.Contains(out, "--system prompt  (env LASH_SYSTEM") {
		t.Errorf("verify -h does not list the machine settings:\n%s", out)
	}
}

// Invalid usage is one line on stderr and exit status 2.
func TestUsageErrors(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "lash.conf")
	if err := os.WriteFile(conf, []byte("replicas = many\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"sessions"}, "sessions: give a subcommand: ls or show or delete (see lash-admin sessions -h)"},
		{[]string{"quarantine", "rm"}, `quarantine: unknown subcommand "rm"; give ls`},
		{[]string{"--key", "k", "send", "s", "t"}, "unknown flag --key before the command"},
		{[]string{"sessions", "ls", "extra"}, `sessions ls takes no arguments, got "extra"`},
		{[]string{"sessions", "show"}, "sessions show: want ID, got no arguments (see lash-admin sessions show -h)"},
		{[]string{"effects", "s1"}, "effects: want ID TURN"},
		{[]string{"send", "s1", "hi", "--bogus"}, "unknown flag --bogus"},
		{[]string{"send", "s1", "hi", "--key"}, "flag --key needs a value"},
		{[]string{"send", "", "hi"}, "the session id is empty"},
		{[]string{"streams", "--replicas", "9"}, "replicas 9: must be 1 to 5"},
		{[]string{"streams", "--tls-cert", "x"}, "--tls-cert and --tls-key go together"},
		{[]string{"streams", "--config", conf}, "lash.conf: replicas: parse error"},
		{[]string{"streams", "--config", "/nowhere/lash.conf"}, "config file"},
		{[]string{"leases", "ls", "--lease-ttl", "soon"}, `invalid value "soon"`},
		{[]string{"help", "bogus"}, `help: unknown command "bogus"`},
		{[]string{"help", "sessions", "bogus"}, `help: unknown command "sessions bogus"`},
		{[]string{"streams", "--listen", "127.0.0.1:0"}, "picks a free port: give --nats"},
		{[]string{"streams", "--listen", "localhost"}, `--listen "localhost": want host:port`},
		// Arguments are checked before lash-admin connects (there is no
		// server at this URL).
		{[]string{"--nats", "nats://127.0.0.1:1", "send", "s1", ""}, "no text, decisions or cancel"},
		{[]string{"--nats", "nats://127.0.0.1:1", "decide", "s1", "call_1", "approve"}, `resume or cancel, not "approve"`},
		{[]string{"--nats", "nats://127.0.0.1:1", "decide", "s1", "call_1", "resume", "--mode", "replay", "--payload", "x"}, "--payload goes with"},
		{[]string{"--nats", "nats://127.0.0.1:1", "decide", "s1", "", "cancel"}, "the call id is empty"},
		{[]string{"--nats", "nats://127.0.0.1:1", "signal", "x", "{nope"}, "must be JSON"},
		{[]string{"--nats", "nats://127.0.0.1:1", "send", "s1", "hi", "--key", strings.Repeat("k", 300)}, "--key: "},
		{[]string{"--nats", "nats://127.0.0.1:1", "decide", "s1", "call_1", "cancel", "--key", strings.Repeat("k", 300)}, "--key: "},
		{[]string{"--nats", "nats://127.0.0.1:1", "cancel", "s1", "--key", strings.Repeat("k", 300)}, "--key: "},
		{[]string{"--nats", "nats://127.0.0.1:1", "signal", "x", "{}", "--key", strings.Repeat("k", 300)}, "--key: "},
		{[]string{"--nats", "nats://127.0.0.1:1", "--prefix", "dep", "signal", "dep.signal.*", "{}"}, "wildcards"},
		{[]string{"--nats", "nats://127.0.0.1:1", "effects", "s1", ""}, "the turn id is empty"},
		{[]string{"--nats", "nats://127.0.0.1:1", "verify", "s1", "--max-iterations", "0"}, "--max-iterations must be positive"},
	} {
		code, out, errOut := run(t, c.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "lash-admin: ") || !strings.Contains(errOut, c.want) ||
			strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// Flags go before the command, after it, and between the arguments; "--"
// ends them.
func TestParse(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "lash.conf")
	// lash-node's settings file: lash-admin takes what it knows.
	text := "nats = nats://from-file:4222\nprefix = dep1\ndata = /var/lib/lash\nscript = weather.txt\nlease-ttl = 9s\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LASH_PREFIX", "from-env")
	a := &app{ctx: context.Background(), stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}
	a.cmd, _ = lookup([]string{"send"})
	pos, err := a.parse([]string{"--config", conf, "s1", "--key=k1", "--json", "--", "--not-a-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pos, "|") != "s1|--not-a-flag" || a.key != "k1" || !a.json || a.conn.URL != "nats://from-file:4222" || a.conn.Prefix != "from-env" {
		t.Fatalf("pos %q key %q json %v url %q prefix %q", pos, a.key, a.json, a.conn.URL, a.conn.Prefix)
	}
	a = &app{ctx: context.Background(), stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}
	a.cmd, _ = lookup([]string{"nodes", "ls"})
	if _, err := a.parse([]string{"--config", conf, "--prefix", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if a.leaseTTL != 9*time.Second || a.conn.Prefix != "from-flag" {
		t.Fatalf("lease TTL %s prefix %q", a.leaseTTL, a.conn.Prefix)
	}
	// Without --nats, lash-admin goes where lash-node's embedded server
	// listens.
	for listen, want := range map[string]string{"": "nats://127.0.0.1:4222", "0.0.0.0:5222": "nats://127.0.0.1:5222",
		"10.0.0.7:4223": "nats://10.0.0.7:4223", "[::1]:4224": "nats://[::1]:4224"} {
		a = &app{ctx: context.Background(), stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}
		a.cmd, _ = lookup([]string{"streams"})
		args := []string{}
		if listen != "" {
			args = append(args, "--listen", listen)
		}
		if _, err := a.parse(args); err != nil {
			t.Fatal(err)
		}
		if url, err := a.url(); err != nil || url != want {
			t.Errorf("--listen %q: %q %v, want %q", listen, url, err, want)
		}
	}
	// The command's own flags never come from the environment.
	t.Setenv("LASH_KEY", "from-env")
	a = &app{ctx: context.Background(), stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}
	a.cmd, _ = lookup([]string{"send"})
	if _, err := a.parse([]string{"s1", "hi"}); err != nil || a.key != "" {
		t.Fatalf("key %q %v", a.key, err)
	}
}

func TestSignalSubject(t *testing.T) {
	for in, want := range map[string]string{
		"github.push":             "lash.signal.github.push",
		"lash.signal.github.push": "lash.signal.github.push",
		"x":                       "lash.signal.x",
		"":                        "",
		"a..b":                    "",
		"a.*":                     "",
		"a.>":                     "",
		"a b":                     "",
		"lash.signal.":            "",
	} {
		got, err := signalSubject("lash", in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
}

func TestProgress(t *testing.T) {
	for _, c := range []struct {
		applied, total uint64
		elapsed        time.Duration
		want           string
	}{
		{0, 0, 0, "sessions  [##############################] 0/0 100% 0 msg/s"},
		{0, 200, time.Second, "sessions  [..............................] 0/200   0% 0 msg/s"},
		{50, 200, time.Second, "sessions  [#######.......................] 50/200  25% 50 msg/s"},
		{300, 200, 2 * time.Second, "sessions  [##############################] 300/300 100% 150 msg/s"},
	} {
		if got := progressLine("sessions", c.applied, c.total, c.elapsed); got != c.want {
			t.Errorf("progressLine(%d, %d, %s) = %q, want %q", c.applied, c.total, c.elapsed, got, c.want)
		}
	}
	// On a terminal the line is redrawn in place and ends with a newline.
	var b bytes.Buffer
	p := startProgress("x", &b, true, 10, func() uint64 { return 10 })
	p.finish()
	if s := b.String(); !strings.HasPrefix(s, "\r") || !strings.HasSuffix(s, " msg/s\n") || !strings.Contains(s, "10/10 100%") {
		t.Errorf("terminal progress %q", s)
	}
	b.Reset()
	p = startProgress("x", &b, false, 10, func() uint64 { return 10 })
	p.finish()
	if s := b.String(); strings.Contains(s, "\r") || strings.Count(s, "\n") != 1 || !strings.Contains(s, "10/10 100%") {
		t.Errorf("progress to a file %q", s)
	}
}
