package cli

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testSettings struct {
	config string
	a, b   string
	c, d   string
	wait   time.Duration
	n      int
	conn   Conn
}

func newTestFlags(s *testSettings) *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.StringVar(&s.config, "config", "", "settings `file`")
	fs.StringVar(&s.a, "a-flag", "default-a", "a")
	fs.StringVar(&s.b, "b", "default-b", "b")
	fs.StringVar(&s.c, "c", "default-c", "c")
	fs.StringVar(&s.d, "d", "default-d", "d")
	fs.DurationVar(&s.wait, "wait", time.Second, "a `duration`")
	fs.IntVar(&s.n, "n", 1, "a number")
	s.conn.Register(fs, "NATS `URL`")
	return fs
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "settings")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Flags win over the environment, the environment over the file, the file
// over the defaults.
func TestPrecedence(t *testing.T) {
	path := writeFile(t, `
# every setting but d
a-flag = from-file
b = from-file
c = "from file, quoted"
wait = 3s
`)
	t.Setenv("T_A_FLAG", "from-env")
	t.Setenv("T_B", "from-env")
	t.Setenv("T_CONFIG", path)
	var s testSettings
	rest, err := Parse(newTestFlags(&s), []string{"--a-flag", "from-flag", "extra"}, "T_", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := testSettings{config: "", a: "from-flag", b: "from-env", c: "from file, quoted", d: "default-d", wait: 3 * time.Second, n: 1}
	if s.a != want.a || s.b != want.b || s.c != want.c || s.d != want.d || s.wait != want.wait || s.n != want.n {
		t.Errorf("settings %+v, want %+v", s, want)
	}
	if len(rest) != 1 || rest[0] != "extra" {
		t.Errorf("remaining arguments %q", rest)
	}
}

// The --config flag beats <prefix>CONFIG; an empty variable counts as unset.
func TestConfigFlagAndEmptyEnv(t *testing.T) {
	fromFlag := writeFile(t, "b = flag-file\n")
	fromEnv := writeFile(t, "b = env-file\n")
	t.Setenv("T_CONFIG", fromEnv)
	t.Setenv("T_C", "")
	var s testSettings
	if _, err := Parse(newTestFlags(&s), []string{"--config", fromFlag}, "T_", nil); err != nil {
		t.Fatal(err)
	}
	if s.b != "flag-file" || s.c != "default-c" {
		t.Errorf("b %q c %q", s.b, s.c)
	}
}

// Aliases are read after the flag's own variable.
func TestAliases(t *testing.T) {
	var s testSettings
	t.Setenv("NATS_URL", "nats://alias:4222")
	if _, err := Parse(newTestFlags(&s), nil, "T_", s.conn.Aliases()); err != nil {
		t.Fatal(err)
	}
	if s.conn.URL != "nats://alias:4222" {
		t.Errorf("URL %q", s.conn.URL)
	}
	t.Setenv("T_NATS", "nats://own:4222")
	if _, err := Parse(newTestFlags(&s), nil, "T_", s.conn.Aliases()); err != nil {
		t.Fatal(err)
	}
	if s.conn.URL != "nats://own:4222" {
		t.Errorf("URL %q", s.conn.URL)
	}
}

// Every mistake is ErrUsage with a message naming what is wrong.
func TestBadSettings(t *testing.T) {
	cases := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want string
	}{
		{name: "unknown flag", args: []string{"--nope"}, want: "not defined: -nope"},
		{name: "bad duration flag", args: []string{"--wait", "soon"}, want: `invalid value "soon" for flag -wait`},
		{name: "bad int env", env: map[string]string{"T_N": "many"}, want: `T_N="many"`},
		{name: "unknown file key", file: "a-flag = x\nbogus = 1\n", want: `unknown setting "bogus"`},
		{name: "bad file value", file: "wait = forever\n", want: "wait: "},
		{name: "no equals sign", file: "a-flag x\n", want: ":1: want name = value"},
		{name: "set twice", file: "b = 1\nb = 2\n", want: ":2: b set twice"},
		{name: "missing file", args: []string{"--config", "/nonexistent/lash.conf"}, want: "config file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := c.args
			if c.file != "" {
				args = append(args, "--config", writeFile(t, c.file))
			}
			var s testSettings
			_, err := Parse(newTestFlags(&s), args, "T_", nil)
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("error %v, want ErrUsage", err)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line containing %q", err, c.want)
			}
		})
	}
}

// --help is ErrUsage and flag.ErrHelp, so a command can tell it apart.
func TestHelp(t *testing.T) {
	var s testSettings
	fs := newTestFlags(&s)
	var printed strings.Builder
	fs.SetOutput(&printed)
	_, err := Parse(fs, []string{"--help"}, "T_", nil)
	if !errors.Is(err, flag.ErrHelp) || !errors.Is(err, ErrUsage) {
		t.Fatalf("error %v", err)
	}
	if printed.Len() != 0 {
		t.Errorf("Parse printed %q", printed.String())
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		conn Conn
		m    Machine
		l    Logging
		want string
	}{
		{name: "bad prefix", conn: Conn{Prefix: "Bad.Prefix", Replicas: 1}, want: "prefix"},
		{name: "tls halves", conn: Conn{Prefix: "lash", Replicas: 1, TLSCert: "c"}, want: "--tls-cert and --tls-key"},
		{name: "inbox wildcard", conn: Conn{Prefix: "lash", Replicas: 1, InboxPrefix: "_INBOX.*"}, want: "--inbox-prefix"},
		{name: "inbox empty token", conn: Conn{Prefix: "lash", Replicas: 1, InboxPrefix: "_INBOX..x"}, want: "--inbox-prefix"},
		{name: "creds and user", conn: Conn{Prefix: "lash", Replicas: 1, Creds: "f", User: "u"}, want: "--creds or --user"},
		{name: "iterations", m: Machine{MaxIterations: 0}, want: "--max-iterations"},
		{name: "negative budget", m: Machine{MaxIterations: 1, TokenBudget: -1}, want: "negative"},
		{name: "log format", l: Logging{Format: "xml", Level: "info"}, want: "--log-format"},
		{name: "log level", l: Logging{Format: "text", Level: "loud"}, want: "--log-level"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			switch {
			case c.conn != (Conn{}):
				err = c.conn.Validate()
			case c.l != (Logging{}):
				err = c.l.Validate()
			default:
				err = c.m.Validate()
			}
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want ErrUsage containing %q", err, c.want)
			}
		})
	}
	good := Conn{Prefix: "lash", Replicas: 3}
	if err := good.Validate(); err != nil {
		t.Error(err)
	}
}

// The help lists every flag once, with its environment names and its
// default, including flags no section names.
func TestUsage(t *testing.T) {
	var s testSettings
	fs := newTestFlags(&s)
	var out strings.Builder
	Usage(&out, fs, "T_", s.conn.Aliases(), []Section{{Title: "First", Names: []string{"wait", "nats"}}})
	text := out.String()
	fs.VisitAll(func(f *flag.Flag) {
		if n := strings.Count(text, "  --"+f.Name+" "); n != 1 {
			t.Errorf("--%s listed %d times", f.Name, n)
		}
		if !strings.Contains(text, EnvName("T_", f.Name)) {
			t.Errorf("%s missing", EnvName("T_", f.Name))
		}
	})
	for _, want := range []string{
		"First:\n  --wait duration  (env T_WAIT; default 1s)\n      a duration\n",
		"  --nats URL  (env T_NATS or NATS_URL)\n",
		"Other settings:\n",
		"  --n int  (env T_N; default 1)\n",
		"  --config file  (env T_CONFIG)\n",
		"  --a-flag string  (env T_A_FLAG; default \"default-a\")\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("help lacks %q:\n%s", want, text)
		}
	}
}

func TestLogger(t *testing.T) {
	var out strings.Builder
	l := Logging{Format: "json", Level: "warn"}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	log := l.Logger(&out)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	if strings.Contains(out.String(), "hidden") || !strings.Contains(out.String(), `"msg":"shown","k":1`) {
		t.Errorf("log %q", out.String())
	}
}
