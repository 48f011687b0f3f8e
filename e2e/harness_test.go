// Package e2e tests lash from the outside: it builds lash-node, lash-admin
// and the example tool server, runs them as processes against a real
// nats-server, talks to them through NATS subjects with the plain nats.go
// client, kills them with SIGKILL and reads the outcome with lash-admin.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var bin struct {
	once sync.Once
	dir  string
	err  error
}

// binary builds the repository's commands once per test run and returns
// the path of name.
func binary(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the commands as processes")
	}
	bin.once.Do(func() {
		bin.dir, bin.err = os.MkdirTemp("", "lash-e2e-bin")
		if bin.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", bin.dir, "../cmd/lash-node", "../cmd/lash-admin", "../examples/tool-server", "../examples/mcp-server")
		out, err := cmd.CombinedOutput()
		if err != nil {
			bin.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if bin.err != nil {
		t.Fatal(bin.err)
	}
	return filepath.Join(bin.dir, name)
}

// secrets holds a deployment secret per top-level test, by name: the
// nodes and lash-admin runs of a test are of its deployments, and an
// operator gives them all the same secret.
var secrets sync.Map

// baseEnv is the environment of the commands a test runs: only the NATS
// server the test names (no NATS_URL), and the test's deployment secret
// (LASH_SECRET_FILE; a --secret-file flag wins over it).
func baseEnv(t testing.TB) []string {
	t.Helper()
	name, _, _ := strings.Cut(t.Name(), "/")
	f, ok := secrets.Load(name)
	if !ok {
		now := time.Now().UnixNano()
		path := filepath.Join(binary(t, "secrets"), fmt.Sprintf("%s-%d", strings.NewReplacer("/", "_", " ", "_").Replace(name), now))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(fmt.Sprintf("%064x", now)), 0o600); err != nil {
			t.Fatal(err)
		}
		f, _ = secrets.LoadOrStore(name, path)
	}
	return append(os.Environ(), "NATS_URL=", "LASH_SECRET_FILE="+f.(string))
}

func TestMain(m *testing.M) {
	if pid := os.Getenv(silentRunnerEnv); pid != "" {
		os.Exit(silentRunner(os.Getenv("LASH_E2E_NATS"), pid))
	}
	code := m.Run()
	if bin.dir != "" {
		os.RemoveAll(bin.dir)
	}
	os.Exit(code)
}

// proc is a running command whose output lines are kept.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	done chan struct{}
	err  error
}

// start runs a built command with args; the test's cleanup kills it.
func start(t testing.TB, name, command string, args ...string) *proc {
	t.Helper()
	return startEnv(t, name, nil, command, args...)
}

// startEnv is start with more environment variables.
func startEnv(t testing.TB, name string, env []string, command string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, env, exec.Command(binary(t, command), args...))
}

// startCmd runs cmd with more environment variables, as start does.
func startCmd(t testing.TB, name string, env []string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: cmd, done: make(chan struct{})}
	p.cmd.Env = append(baseEnv(t), env...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		w.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.name, strings.Join(p.lines(), "\n"))
		}
	})
	return p
}

func (p *proc) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

// count counts output lines containing s.
func (p *proc) count(s string) int {
	n := 0
	for _, l := range p.lines() {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// waitLine waits for an output line containing s.
func (p *proc) waitLine(s string, d time.Duration) {
	p.t.Helper()
	testenv.WaitFor(p.t, d, func() error {
		if p.count(s) > 0 {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) without printing %q", p.name, p.err, s)
		default:
		}
		return fmt.Errorf("%s has not printed %q yet", p.name, s)
	})
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// signal sends sig and waits for the exit, returning the exit code.
func (p *proc) signal(sig syscall.Signal, d time.Duration) int {
	p.t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %v of %v", p.name, d, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// run runs a command to its end and returns stdout, stderr and exit code.
func run(t testing.TB, command string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary(t, command), args...)
	cmd.Env = baseEnv(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v", command, args, err)
		}
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

// deployment is one NATS server with a lash deployment on it.
type deployment struct {
	t        testing.TB
	url      string
	nc       *nats.Conn
	dir      string
	replicas int
}

func newDeployment(t testing.TB, opts ...testenv.Option) *deployment {
	srv := testenv.RunJetStream(t, opts...)
	return &deployment{t: t, url: srv.URL(), nc: srv.Conn(t), dir: t.TempDir()}
}

// newClusterDeployment runs the deployment on a 3-server cluster; nodes
// and lash-admin use R3 streams.
func newClusterDeployment(t testing.TB, opts ...testenv.Option) *deployment {
	binary(t, "lash-node") // skips under -short before the cluster starts
	testenv.SkipClusterUnderRace(t)
	c := testenv.RunCluster(t, 3, opts...)
	return &deployment{t: t, url: c.URL(), nc: c.Conn(t), dir: t.TempDir(), replicas: 3}
}

// embedded starts node "solo" on its embedded server at a free port,
// running the script with content script, and connects a plain client
// (no credentials, no secret) to that server.
func embedded(t *testing.T, script string, extra ...string) (*deployment, *proc, jetstream.JetStream) {
	t.Helper()
	dir := t.TempDir()
	d := &deployment{t: t, dir: dir}
	port := freePort(t)
	d.url = "nats://127.0.0.1:" + port
	args := append([]string{"--script", d.file("node.script", script), "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:" + port,
		"--http", "off", "--node-id", "solo", "--log-format", "text", "--tool-refresh", "500ms"}, extra...)
	node := start(t, "solo", "lash-node", args...)
	node.waitLine("lash-node running", 30*time.Second)
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	d.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return d, node, js
}

// file writes a file under the deployment's directory.
func (d *deployment) file(name, content string) string {
	d.t.Helper()
	path := filepath.Join(d.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
	return path
}

// admin runs lash-admin --json against the deployment and decodes its
// output into v.
func (d *deployment) admin(v any, args ...string) {
	d.t.Helper()
	if err := d.tryAdmin(v, args...); err != nil {
		d.t.Fatal(err)
	}
}

// tryAdmin is admin returning what went wrong, for polls.
func (d *deployment) tryAdmin(v any, args ...string) error {
	out, errOut, code := run(d.t, "lash-admin", append([]string{"--nats", d.url, "--replicas", fmt.Sprint(max(d.replicas, 1)),
		"--cache", filepath.Join(d.dir, "admin-cache"), "--json"}, args...)...)
	if code != 0 {
		return fmt.Errorf("lash-admin %v: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("lash-admin %v: %v\n%s", args, err, out)
	}
	return nil
}

// send appends an input as any NATS client would: a JetStream publish is
// a request on the subject, Nats-Msg-Id is the idempotency key, and the
// reply is the stream's acknowledgement. JetStream dedupes msg ids across
// the stream, so the key is made unique to the session.
func (d *deployment) send(session, key string, data []byte) (seq uint64) {
	d.t.Helper()
	return d.sendOn("in", session, key, data)
}

// sendOn is send on the session's subject kind: in or decide.
func (d *deployment) sendOn(kind, session, key string, data []byte) (seq uint64) {
	d.t.Helper()
	m := nats.NewMsg("lash.sess." + session + "." + kind)
	m.Header.Set("Nats-Msg-Id", session+"/"+key)
	m.Data = data
	reply, err := d.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		d.t.Fatal(err)
	}
	var ack struct {
		Seq   uint64 `json:"seq"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil || ack.Error != nil || ack.Seq == 0 {
		d.t.Fatalf("publish to %s: %s (%v)", m.Subject, reply.Data, err)
	}
	return ack.Seq
}
