package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/help.txt from the current --help")

const okScript = "default\n  say hello\n"

// Every invalid setting makes the real binary print one line saying what
// is wrong and exit with status 2, before it starts anything.
func TestBadSettingsExit2(t *testing.T) {
	script := writeFile(t, "ok.script", okScript)
	bad := writeFile(t, "bad.script", "rule x\n  when tools ~ 1\n  say y\n")
	conf := writeFile(t, "lash.conf", "script = "+script+"\ncolour = blue\n")
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown flag", nil, []string{"--script", script, "--frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"bad duration", nil, []string{"--script", script, "--drain-timeout", "soon"}, `invalid value "soon" for flag -drain-timeout`},
		{"bad duration in env", []string{"LASH_TOOL_REFRESH=often"}, []string{"--script", script}, `LASH_TOOL_REFRESH="often"`},
		{"script and base-url", nil, []string{"--script", script, "--base-url", "http://127.0.0.1:1/v1", "--model", "m"}, "give --script or --base-url, not both"},
		{"no provider", nil, nil, "no model provider: give --script FILE for a scripted model, or --model NAME"},
		{"base-url without model", nil, []string{"--base-url", "http://127.0.0.1:1/v1"}, "--base-url needs --model NAME"},
		{"missing mcp servers", nil, []string{"--script", script, "--mcp-servers", "/nonexistent/mcp.yaml"}, "--mcp-servers: open /nonexistent/mcp.yaml"},
		{"mcp header secret missing", nil, []string{"--script", script, "--mcp-servers", writeFile(t, "mcp.yaml", "- name: gh\n  url: https://h/mcp\n  headers: {Authorization: env:LASH_TEST_NO_SUCH}\n")}, "LASH_TEST_NO_SUCH is not set"},
		{"unknown provider", nil, []string{"--model", "m", "--provider", "gemini"}, `--provider "gemini": openai or anthropic`},
		{"anthropic without a key", nil, []string{"--model", "m", "--provider", "anthropic"}, "--provider anthropic needs ANTHROPIC_API_KEY"},
		{"missing script", nil, []string{"--script", "/nonexistent/model.script"}, "--script: open /nonexistent/model.script"},
		{"bad script", nil, []string{"--script", bad}, "scripted: line 2"},
		{"unknown config key", nil, []string{"--config", conf}, `unknown setting "colour"`},
		{"fractional lease", []string{"LASH_LEASE_TTL=1500ms"}, []string{"--script", script}, "--lease-ttl must be whole seconds"},
		{"bad log level", nil, []string{"--script", script, "--log-level", "chatty"}, "--log-level must be"},
		{"bad http address", nil, []string{"--script", script, "--http", "9464"}, `--http "9464": want host:port or off`},
		{"bad prefix", nil, []string{"--script", script, "--prefix", "Lash.Prod"}, "prefix"},
		{"empty prefix", nil, []string{"--script", script, "--prefix", ""}, "--prefix cannot be empty"},
		{"no replicas", nil, []string{"--script", script, "--replicas", "0"}, "--replicas 0: must be 1 to 5"},
		{"no input size", nil, []string{"--script", script, "--max-input", "0"}, "--max-input, --inline-max and --max-payload must be positive"},
		{"no tool refresh", nil, []string{"--script", script, "--tool-refresh", "0s"}, "--tool-refresh 0s: at least 100ms"},
		{"no model timeout", nil, []string{"--script", script, "--model-timeout", "0s"}, "--model-timeout must be positive"},
		{"stray argument", nil, []string{"--script", script, "serve"}, `unexpected argument "serve"`},
		{"demo arguments", nil, []string{"demo", "--fast"}, "demo takes no arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runOnce(t, c.env, c.args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "lash-node: ") || !strings.Contains(lines[0], c.want) {
				t.Errorf("stderr %q, want one line containing %q", stderr, c.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
		})
	}
}

// --help prints every setting with its environment name, exits 0, and
// matches testdata/help.txt (go test -run TestHelp -rewrite updates it;
// the README quotes it).
func TestHelp(t *testing.T) {
	code, stdout, stderr := runOnce(t, nil, "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var s settings
	newFlagSet(&s).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(stdout, "  --"+f.Name+" ") || !strings.Contains(stdout, cli.EnvName(envPrefix, f.Name)) {
			t.Errorf("--help lacks --%s or its environment name", f.Name)
		}
	})
	for _, want := range []string{"NATS_URL", apiKeyEnv, "lash-node demo", "Other settings"} {
		if want == "Other settings" {
			if strings.Contains(stdout, want) {
				t.Errorf("a setting is in no section of the help:\n%s", stdout)
			}
			continue
		}
		if !strings.Contains(stdout, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	golden := filepath.Join("testdata", "help.txt")
	if *rewrite {
		if err := os.WriteFile(golden, []byte(stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(want) {
		t.Errorf("--help differs from %s (rerun with -rewrite and review the diff):\n%s", golden, stdout)
	}
}

// Settings come from flags over environment over file over defaults; the
// provider follows from them.
func TestSettingsPrecedence(t *testing.T) {
	script := writeFile(t, "ok.script", okScript)
	conf := writeFile(t, "lash.conf", "script = "+script+"\ndrain-timeout = 5s\ntool-refresh = 7s\nconcurrency = 3\n")
	t.Setenv("LASH_CONFIG", conf)
	t.Setenv("LASH_TOOL_REFRESH", "9s")
	t.Setenv("LASH_CONCURRENCY", "4")
	t.Setenv("NATS_URL", "nats://127.0.0.1:4333")
	s, _, err := parseSettings([]string{"--concurrency", "5"})
	if err != nil {
		t.Fatal(err)
	}
	if s.drainTimeout != 5*time.Second || s.toolRefresh != 9*time.Second || s.concurrency != 5 || s.leaseTTL != 15*time.Second {
		t.Errorf("drain %s refresh %s concurrency %d lease %s", s.drainTimeout, s.toolRefresh, s.concurrency, s.leaseTTL)
	}
	if s.conn.URL != "nats://127.0.0.1:4333" || s.http != "127.0.0.1:9464" || s.data != "lash-data" {
		t.Errorf("url %q http %q data %q", s.conn.URL, s.http, s.data)
	}
	if _, ok := s.model.(*scripted.Model); !ok || s.machine.ModelName != "scripted" {
		t.Errorf("model %T named %q", s.model, s.machine.ModelName)
	}
}

func TestOpenAIProvider(t *testing.T) {
	t.Setenv(apiKeyEnv, "sk-test")
	s, _, err := parseSettings([]string{"--model", "gpt-test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.model.(*openai.Client); !ok {
		t.Errorf("model %T", s.model)
	}
	_, _, err = parseSettings([]string{"--help"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestNodeVersion(t *testing.T) {
	defer func(v string) { version = v }(version)
	for in, want := range map[string]string{"v1.2.3": "1.2.3", "1.4.0-rc.1": "1.4.0-rc.1", "v0.3.0+dirty": "0.3.0", "devel": "0.0.0-dev"} {
		version = in
		if got := nodeVersion(); got != want {
			t.Errorf("version %q: %q, want %q", in, got, want)
		}
	}
}

// --version prints the version and exits 0.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errOut); code != exitOK || !strings.HasPrefix(out.String(), "lash-node ") {
		t.Fatalf("--version: exit %d %q %q", code, out.String(), errOut.String())
	}
}
