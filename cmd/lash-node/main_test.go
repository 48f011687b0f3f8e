package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
)

// The tests run the real binary, built once per test run.
var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds lash-node (without the race detector: it tests the
// program, not the test) and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts lash-node")
	}
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "lash-node-test"); buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "lash-node")
		out, err := exec.Command(goBin, "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// cleanEnv is the test's environment without any setting lash-node reads.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, envPrefix) || strings.HasPrefix(kv, "NATS_URL=") || strings.HasPrefix(kv, apiKeyEnv+"=") || strings.HasPrefix(kv, anthropicAPIKeyEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// proc is a running lash-node whose stderr carries JSON logs.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout testenv.Buffer
	mu     sync.Mutex
	logs   []map[string]any
	raw    []string
	// changed is signalled when a line arrives.
	changed chan struct{}
	exited  chan struct{}
	err     error // set before exited is closed
}

// start runs lash-node with args and a clean environment plus env.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(binary(t), args...), exited: make(chan struct{}), changed: make(chan struct{}, 1)}
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout = &p.stdout
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			_ = json.Unmarshal(sc.Bytes(), &m)
			p.mu.Lock()
			p.raw = append(p.raw, sc.Text())
			if m != nil {
				p.logs = append(p.logs, m)
			}
			p.mu.Unlock()
			select {
			case p.changed <- struct{}{}:
			default:
			}
		}
		p.err = p.cmd.Wait() // after stderr is read to its end, as Wait requires
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("lash-node stderr:\n%s", p.stderr())
		}
	})
	return p
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.raw, "\n")
}

// log waits for a log line with msg and returns it.
func (p *proc) log(msg string) map[string]any {
	p.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if m := p.find(msg); m != nil {
			return m
		}
		select {
		case <-p.changed:
		case <-p.exited:
			if m := p.find(msg); m != nil {
				return m
			}
			p.t.Fatalf("lash-node exited before logging %q", msg)
		case <-deadline:
			p.t.Fatalf("lash-node did not log %q within 20s", msg)
		}
	}
}

func (p *proc) find(msg string) map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.logs {
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to exit and returns its status.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("lash-node still running after %s", timeout)
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		p.t.Fatal(p.err)
	}
	return 0
}

// runOnce runs lash-node to its end and returns its exit status, stdout
// and stderr.
func runOnce(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
