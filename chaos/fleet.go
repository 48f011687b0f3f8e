package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
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

// A Fleet is a deployment of real processes: nats-servers in one
// JetStream cluster (R3, fsync before every acknowledgement) and
// lash-nodes joined to them. Every link goes through a Proxy of its own:
// each server's route to each other server, and each node's connection to
// each server. So any link can be partitioned (one way or both), slowed or
// cut, and any process killed, restarted, paused and resumed.
//
// Servers advertise no client URLs and an unreachable route address, so
// neither a node nor a server can find a way around its proxies.
type Fleet struct {
	t   testing.TB
	cfg FleetConfig
	dir string

	Servers []*Process
	Nodes   []*Process
	// Routes[i][j] carries server i's route to server j (nil when i == j);
	// Links[n][j] node n's connection to server j.
	Routes [][]*Proxy
	Links  [][]*Proxy
	// ClientLinks[j] carries the workload's clients to server j: faults of
	// links and servers meet them too, and they retry as clients do.
	ClientLinks []*Proxy

	clientPorts []int
	secret      []byte
	proxies     []*Proxy
}

// FleetConfig says what a Fleet runs.
type FleetConfig struct {
	// Servers and Nodes count the processes (3 and 3 by default).
	Servers, Nodes int
	// NodeArgs are more flags of every lash-node (the model, the lease TTL).
	NodeArgs []string
	// NodeEnv is more environment of every lash-node.
	NodeEnv []string
	// NodeBinary, if set, is the lash-node to run (BrokenNode).
	NodeBinary string
	// Seed drives the proxies' jitter.
	Seed uint64
}

// Process is one process of a fleet, restartable under the same name,
// directory and ports.
type Process struct {
	Name string
	bin  string
	args []string
	env  []string
	log  *os.File

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	paused  bool
	lines   []string
	started int
}

var built struct {
	once sync.Once
	dir  string
	err  error
}

// Binaries builds nats-server and lash-node once per test binary and
// returns the directory that holds them. The test process runs from the
// package's directory, so the module's commands are found relative to it.
func Binaries(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs nats-server and lash-node as processes")
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "lash-chaos-bin")
		if built.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", built.dir, "github.com/nats-io/nats-server/v2", "../cmd/lash-node", "../cmd/lash-admin")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

var brokenBuilds sync.Map // build tags -> *brokenBuild

type brokenBuild struct {
	once sync.Once
	path string
	err  error
}

// BrokenNode builds lash-node with build tags that remove a guard on
// purpose (guard_*.go files of the module), for a check of the check:
// the harness must find what the missing guard lets through. It returns
// the binary's path.
func BrokenNode(t testing.TB, tags string) string {
	t.Helper()
	dir := Binaries(t)
	v, _ := brokenBuilds.LoadOrStore(tags, &brokenBuild{})
	b := v.(*brokenBuild)
	b.once.Do(func() {
		b.path = filepath.Join(dir, "lash-node-"+strings.ReplaceAll(tags, ",", "-"))
		cmd := exec.Command("go", "build", "-tags", tags, "-o", b.path, "../cmd/lash-node")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build -tags %s: %v\n%s", tags, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// StartFleet starts the servers, waits for their cluster to form, then
// starts the nodes; t's cleanup stops everything.
func StartFleet(t testing.TB, cfg FleetConfig) *Fleet {
	t.Helper()
	if cfg.Servers == 0 {
		cfg.Servers = 3
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	bin := Binaries(t)
	f := &Fleet{t: t, cfg: cfg, dir: t.TempDir()}
	t.Cleanup(f.stop)
	ports := freePorts(t, 2*cfg.Servers)
	f.clientPorts = ports[:cfg.Servers]
	routePorts := ports[cfg.Servers:]
	seed := cfg.Seed
	proxy := func(port int) *Proxy {
		seed++
		p, err := Listen(fmt.Sprintf("127.0.0.1:%d", port), seed)
		if err != nil {
			t.Fatal(err)
		}
		f.proxies = append(f.proxies, p) // closed by stop, once the processes are gone
		return p
	}
	f.Routes = make([][]*Proxy, cfg.Servers)
	for i := range f.Routes {
		f.Routes[i] = make([]*Proxy, cfg.Servers)
		for j := range f.Routes[i] {
			if i != j {
				f.Routes[i][j] = proxy(routePorts[j])
			}
		}
	}
	for i := range cfg.Servers {
		name := fmt.Sprintf("s%d", i)
		var routes []string
		for j, p := range f.Routes[i] {
			if j != i {
				routes = append(routes, fmt.Sprintf("%q", "nats-route://"+p.Addr()))
			}
		}
		conf := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%d"
# A stalled link is found in seconds, as a partition should be.
ping_interval: "1s"
ping_max: 3
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: lash-chaos
  listen: "127.0.0.1:%d"
  # Clients learn no other server, and servers no address but the proxies'.
  no_advertise: true
  advertise: "127.0.0.1:1"
  # One route per pair: extra pooled routes would dial the advertised
  # address, which leads nowhere.
  pool_size: -1
  routes: [%s]
}
`, name, f.clientPorts[i], filepath.Join(f.dir, name, "js"), routePorts[i], strings.Join(routes, ", "))
		path := filepath.Join(f.dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		f.Servers = append(f.Servers, f.process(name, filepath.Join(bin, "nats-server"), nil, "-c", path))
	}
	for _, s := range f.Servers {
		s.Start(t)
	}
	// Every node of a deployment signs with the same secret.
	f.secret = []byte(fmt.Sprintf("%064x", cfg.Seed^uint64(time.Now().UnixNano())))
	secretFile := filepath.Join(f.dir, "secret")
	if err := os.WriteFile(secretFile, f.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	for j := range cfg.Servers {
		f.ClientLinks = append(f.ClientLinks, proxy(f.clientPorts[j]))
	}
	f.Links = make([][]*Proxy, cfg.Nodes)
	for n := range cfg.Nodes {
		var urls []string
		for j := range cfg.Servers {
			p := proxy(f.clientPorts[j])
			f.Links[n] = append(f.Links[n], p)
			urls = append(urls, "nats://"+p.Addr())
		}
		name := fmt.Sprintf("n%d", n)
		args := append([]string{"--nats", strings.Join(urls, ","), "--replicas", "3", "--node-id", name,
			"--data", filepath.Join(f.dir, name), "--http", "off", "--log-format", "text", "--secret-file", secretFile}, cfg.NodeArgs...)
		nodeBin := filepath.Join(bin, "lash-node")
		if cfg.NodeBinary != "" {
			nodeBin = cfg.NodeBinary
		}
		f.Nodes = append(f.Nodes, f.process(name, nodeBin, cfg.NodeEnv, args...))
	}
	return f
}

// WaitCluster waits until the servers' cluster places an R3 stream: a
// meta leader is elected and knows every peer. nc is a connection to the
// servers.
func (f *Fleet) WaitCluster(t testing.TB, nc *nats.Conn) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "CHAOS_READY", Subjects: []string{"chaos.ready"}, Replicas: len(f.Servers), Storage: jetstream.MemoryStorage})
		if err != nil {
			return err
		}
		return js.DeleteStream(ctx, "CHAOS_READY")
	})
}

// URLs are the servers' client URLs, not through any proxy: for the
// test's own clients, which the faults leave alone.
func (f *Fleet) URLs() string {
	var urls []string
	for _, p := range f.clientPorts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(urls, ",")
}

// Admin runs lash-admin on the fleet's servers (not through any proxy)
// and returns its standard output.
func (f *Fleet) Admin(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(Binaries(f.t), "lash-admin"), append([]string{"--nats", f.URLs(), "--replicas", "3"}, args...)...)
	cmd.Env = append(os.Environ(), "LASH_SECRET_FILE="+filepath.Join(f.dir, "secret"))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("lash-admin %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// Secret is the deployment's secret, for clients that read its records.
func (f *Fleet) Secret() []byte { return f.secret }

// ClientURLs are the servers' client URLs through the client links.
func (f *Fleet) ClientURLs() string {
	var urls []string
	for _, p := range f.ClientLinks {
		urls = append(urls, "nats://"+p.Addr())
	}
	return strings.Join(urls, ",")
}

// Dir is the fleet's directory: server stores, node data, logs.
func (f *Fleet) Dir() string { return f.dir }

func (f *Fleet) process(name, bin string, env []string, args ...string) *Process {
	log, err := os.Create(filepath.Join(f.dir, name+".log"))
	if err != nil {
		f.t.Fatal(err)
	}
	return &Process{Name: name, bin: bin, args: args, env: env, log: log}
}

// PartitionNode holds node n's traffic to and from every server in dir.
func (f *Fleet) PartitionNode(n int, dir Direction) {
	for _, p := range f.Links[n] {
		p.Partition(dir)
	}
}

// PartitionServer holds server i's route traffic with every other server
// in dir (Up: what i sends).
func (f *Fleet) PartitionServer(i int, dir Direction) {
	for j := range f.Routes {
		if j == i {
			continue
		}
		f.Routes[i][j].Partition(dir)
		f.Routes[j][i].Partition(flip(dir))
	}
}

func flip(d Direction) Direction {
	var out Direction
	if d&Up != 0 {
		out |= Down
	}
	if d&Down != 0 {
		out |= Up
	}
	return out
}

// Proxies lists every proxy of the fleet.
func (f *Fleet) Proxies() []*Proxy {
	var out []*Proxy
	for _, row := range append(append(f.Routes, f.Links...), f.ClientLinks) {
		for _, p := range row {
			if p != nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// Heal ends every link fault: partitions, delays and refusals.
func (f *Fleet) Heal() {
	for _, p := range f.Proxies() {
		p.Heal()
		p.Delay(0, 0)
		p.Refuse(false)
	}
}

func (f *Fleet) stop() {
	for _, p := range append(f.Nodes, f.Servers...) {
		p.Kill()
		_ = p.log.Close()
	}
	for _, p := range f.proxies {
		_ = p.Close()
	}
}

// Start runs the process; it fails t if it cannot start.
func (p *Process) Start(t testing.TB) {
	t.Helper()
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
}

// start runs the process, or says why it cannot.
func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("chaos: %s is running", p.Name)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	// A process that holds the pipe's other end open (a child) cannot
	// keep Wait, and so Kill, waiting for ever.
	cmd.WaitDelay = 5 * time.Second
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: starting %s: %w", p.Name, err)
	}
	p.started++
	fmt.Fprintf(p.log, "=== start %d at %s\n", p.started, time.Now().Format(time.RFC3339Nano))
	done := make(chan struct{})
	p.cmd, p.done, p.paused = cmd, done, false
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			fmt.Fprintln(p.log, sc.Text())
			p.lines = append(p.lines, sc.Text())
			if len(p.lines) > 2000 {
				p.lines = p.lines[1000:]
			}
			p.mu.Unlock()
		}
		// A line past the scanner's bound must not stop the process on
		// a full pipe.
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() {
		_ = cmd.Wait()
		w.Close()
		close(done)
	}()
	return nil
}

// exited reports whether the process was started and ended on its own.
func (p *Process) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Running reports whether the process was started and not killed.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Kill ends the process with SIGKILL (resuming it first if paused, as the
// kernel would kill a stopped process anyway) and waits for it to go.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.paused = nil, false
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Pause stops the process with SIGSTOP: it holds its connections and
// leases as a frozen VM or a long GC pause does, and writes when resumed.
func (p *Process) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.paused {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		p.paused = true
	}
}

// Resume continues a paused process.
func (p *Process) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.paused {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.paused = false
	}
}

// WaitLine waits until the process printed a line holding s since its
// last start.
func (p *Process) WaitLine(t testing.TB, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.Contains(l, s) {
				p.lines = nil
				p.mu.Unlock()
				return
			}
		}
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
			t.Fatalf("chaos: %s exited before printing %q:\n%s", p.Name, s, p.Tail(60))
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("chaos: %s printed no %q in %s:\n%s", p.Name, s, d, p.Tail(60))
}

// Tail is the last n lines the process printed (of those WaitLine has
// not passed over).
func (p *Process) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
}

// freePorts picks n free loopback ports; another process may take one
// before it is used, which the callers' starts then report.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return out
}
