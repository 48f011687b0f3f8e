package codemode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ChildEnv, set in a process's environment, makes it a sandbox's child:
// a binary whose programs run in a Sandbox calls ServeChild first thing
// (lash-node, lash-admin, lash-bench and the tests that run programs do).
const ChildEnv = "LASH_CODEMODE_CHILD"

// Sandbox runs programs each in a child process the OS bounds: on Linux,
// memory (RLIMIT_DATA, with the Go runtime's soft limit below it) and CPU
// time (RLIMIT_CPU); elsewhere the soft limit only. The child is killed
// when it stays quiet, neither calling nor ending, past its bound. A
// child that ends its program fresh takes the next one, and otherwise one
// is started ahead for it, so a program seldom waits for a process to
// start; Close stops the one waiting (a child whose parent is gone ends
// when its stdin does). What the interpreter cannot bound (ADR 0042: one
// expression building gigabytes, one builtin recursing for minutes) ends
// the child, and the program with a readable error, never the node.
type Sandbox struct {
	// Memory bounds a child's memory (default 512 MiB); CPU its CPU
	// time (default 60 s).
	Memory int64
	CPU    time.Duration
	// Command makes the child's command; by default this executable
	// again, which must call ServeChild.
	Command func(ctx context.Context) *exec.Cmd

	mu       sync.Mutex
	spare    *child // started ahead, waiting for a program
	starting bool
	closed   bool
}

// message is one line between a sandbox and its child: the job, calls
// and their outcomes, the result.
type message struct {
	Source   string    `json:"source,omitempty"`
	Tools    []Tool    `json:"tools,omitempty"`
	Limits   *Limits   `json:"limits,omitempty"`
	Calls    []Call    `json:"calls,omitempty"`
	Outcomes []Outcome `json:"outcomes,omitempty"`
	Result   *Result   `json:"result,omitempty"`
	// Last, with a result: the child takes no other program.
	Last bool `json:"last,omitempty"`
}

// maxLine bounds a line between sandbox and child: a fan-out's calls or
// outcomes at their bounds, output and an error escaped at worst six
// bytes a byte, and room. maxJob bounds the first, the job: the program
// and its tools' descriptions.
func maxLine(lim Limits) int {
	return (lim.Fanout+1)*(lim.Value+6*maxFailure+1024) + 12*lim.Output + 1<<20
}

const maxJob = 16 << 20

// lines reads newline-ended lines of at most max bytes.
type lines struct {
	r   *bufio.Reader
	max int
}

func newLines(r io.Reader, max int) *lines {
	return &lines{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

func (l *lines) next() ([]byte, error) {
	var line []byte
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(line)+len(chunk) > l.max {
			return nil, fmt.Errorf("a line over %d bytes", l.max)
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// edge is what a host answered as a child may take it: a failure's
// message clipped, a value past the bound refused, so no line runs past
// maxLine.
func edge(outs []Outcome, lim Limits) []Outcome {
	for i := range outs {
		outs[i].Error = clip(outs[i].Error, maxFailure)
		if len(outs[i].Value) > lim.Value {
			outs[i] = Outcome{Error: fmt.Sprintf("a result of %d bytes, at most %d", len(outs[i].Value), lim.Value)}
		}
	}
	return outs
}

// child is a started child process, waiting for its program.
type child struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *lines
	stderr *boundedBuffer
	cancel context.CancelFunc // kills it
}

func (s *Sandbox) bounds() (memory int64, cpu time.Duration) {
	memory, cpu = s.Memory, s.CPU
	if memory <= 0 {
		memory = 512 << 20
	}
	if cpu <= 0 {
		cpu = time.Minute
	}
	return memory, cpu
}

// start starts a child; it waits for its program on its stdin.
func (s *Sandbox) start() (*child, error) {
	memory, cpu := s.bounds()
	ctx, cancel := context.WithCancel(context.Background())
	var cmd *exec.Cmd
	if s.Command != nil {
		cmd = s.Command(ctx)
	} else {
		exe, err := os.Executable()
		if err != nil {
			cancel()
			return nil, fmt.Errorf("codemode: %w", err)
		}
		// A test binary that is no child runs no test either.
		cmd = exec.CommandContext(ctx, exe, "-test.run=^$")
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, fmt.Sprintf("%s=%d,%d", ChildEnv, memory, int64(cpu/time.Second)))
	c := &child{cmd: cmd, stderr: &boundedBuffer{max: 64 << 10}, cancel: cancel}
	cmd.Stderr = c.stderr
	var err error
	var out io.ReadCloser
	if c.in, err = cmd.StdinPipe(); err == nil {
		out, err = cmd.StdoutPipe()
	}
	c.out = newLines(out, maxJob)
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("codemode: starting the sandbox: %w", err)
	}
	return c, nil
}

// take is a child for a program: the one started ahead, if there is one.
// (Run starts the next ahead once its program ends, not while it runs.)
func (s *Sandbox) take() (*child, error) {
	s.mu.Lock()
	c := s.spare
	s.spare = nil
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errors.New("codemode: the sandbox is closed")
	}
	if c != nil {
		return c, nil
	}
	return s.start()
}

// refill starts a child ahead, unless one is.
func (s *Sandbox) refill() {
	s.mu.Lock()
	if s.spare != nil || s.closed || s.starting {
		s.mu.Unlock()
		return
	}
	s.starting = true
	s.mu.Unlock()
	c, err := s.start()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting = false
	switch {
	case err != nil:
	case s.closed || s.spare != nil:
		c.cancel()
		go func() { _ = c.cmd.Wait() }()
	default:
		s.spare = c
	}
}

// Close stops the child started ahead. Programs running finish.
func (s *Sandbox) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if c := s.spare; c != nil {
		s.spare = nil
		c.cancel()
		go func() { _ = c.cmd.Wait() }()
	}
}

// Run runs src as Run does, in a child process.
func (s *Sandbox) Run(ctx context.Context, src string, tools []Tool, host Host, lim Limits) (Result, error) {
	lim.defaults()
	if len(src) > lim.Source {
		return Result{Error: fmt.Sprintf("the program is %d bytes, at most %d", len(src), lim.Source)}, nil
	}
	c, err := s.take()
	if err != nil {
		return Result{}, err
	}
	// A child that ends with its program is replaced ahead; one kept for
	// the next program needs no other.
	kept := false
	defer func() {
		if !kept {
			go s.refill()
		}
	}()
	job := message{Source: src, Tools: tools, Limits: &lim}
	c.stderr.reset() // a kept child's says nothing of its last program
	enc := json.NewEncoder(c.in)
	if enc.Encode(job) != nil {
		// The child waiting for a program died: a new one.
		c.kill()
		if c, err = s.start(); err != nil {
			return Result{}, err
		}
		enc = json.NewEncoder(c.in)
		if err := enc.Encode(job); err != nil {
			c.kill()
			return Result{}, fmt.Errorf("codemode: the sandbox did not take the program: %w", err)
		}
	}
	stopOnCtx := context.AfterFunc(ctx, c.cancel)
	// The child stays quiet past its bound: killed, with a grace for its
	// own bound to speak first.
	var quiet sync.Mutex
	killed := ""
	watch := time.AfterFunc(lim.Quiet+2*time.Second, func() {
		quiet.Lock()
		killed = fmt.Sprintf("the program ran %s without a call", lim.Quiet)
		quiet.Unlock()
		c.cancel()
	})
	end := func(res Result, err error) (Result, error) {
		watch.Stop()
		stopOnCtx()
		c.kill()
		return res, err
	}
	c.out.max = maxLine(lim)
	for {
		line, err := c.out.next()
		if err != nil {
			break // the child died, or wrote past its bounds: its end says why
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			return end(Result{}, fmt.Errorf("codemode: the sandbox said %.200q", line))
		}
		if m.Result != nil {
			// A child that was neither killed nor is done takes the next
			// program: no process to start for it.
			if watch.Stop() && stopOnCtx() && !m.Last {
				c.out.max = maxJob
				kept = s.keep(c)
				return *m.Result, nil
			}
			return end(*m.Result, nil)
		}
		watch.Stop()
		outs, err := host.Do(ctx, m.Calls)
		if err != nil {
			return end(Result{}, err)
		}
		watch.Reset(lim.Quiet + 2*time.Second)
		if err := enc.Encode(message{Outcomes: edge(outs, lim)}); err != nil {
			break // the child died: its end says why
		}
	}
	watch.Stop()
	stopOnCtx()
	c.cancel()
	werr := c.cmd.Wait()
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	quiet.Lock()
	why := killed
	quiet.Unlock()
	if why == "" {
		memory, cpu := s.bounds()
		why = death(werr, c.stderr.String(), memory, cpu)
	}
	return Result{Error: why}, nil
}

func (c *child) kill() {
	c.cancel()
	_ = c.cmd.Wait()
}

// keep makes a child that ended its program the one for the next, unless
// there is one, and says whether it did.
func (s *Sandbox) keep(c *child) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare != nil || s.closed {
		go c.kill()
		return s.spare != nil
	}
	s.spare = c
	return true
}

// death says why a child ended without a result.
func death(err error, stderr string, memory int64, cpu time.Duration) string {
	switch {
	case strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory") ||
		strings.Contains(stderr, "failed to allocate"): // the race detector's allocator, in race builds
		return fmt.Sprintf("the program used more than %d MiB of memory", memory>>20)
	case strings.Contains(stderr, "stack overflow") || strings.Contains(stderr, "stack exceeds"):
		return "the program nested values too deeply"
	case strings.Contains(stderr, cpuExceeded) || err != nil && strings.Contains(err.Error(), "CPU time limit"):
		return fmt.Sprintf("the program used more than %s of CPU time", cpu)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(stderr), "\n")
	return clip(fmt.Sprintf("the program's sandbox ended (%v): %s", err, first), 500)
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// reset empties it: a child's stderr is read for the program it runs.
func (w *boundedBuffer) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = w.b[:0]
}

func (w *boundedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// ServeChild serves as a sandbox's child when ChildEnv says so, and
// exits; otherwise it returns at once.
func ServeChild() {
	spec := os.Getenv(ChildEnv)
	if spec == "" {
		return
	}
	memory, cpu, err := childLimits(spec)
	if err == nil {
		err = bound(memory, cpu)
	}
	if err == nil {
		err = serveChild(os.Stdin, os.Stdout, memory, cpu)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "codemode child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func childLimits(spec string) (memory int64, cpu time.Duration, err error) {
	m, c, ok := strings.Cut(spec, ",")
	memory, err1 := strconv.ParseInt(m, 10, 64)
	secs, err2 := strconv.ParseInt(c, 10, 64)
	if !ok || err1 != nil || err2 != nil || memory <= 0 || secs <= 0 {
		return 0, 0, fmt.Errorf("%s=%q: want <memory bytes>,<cpu seconds>", ChildEnv, spec)
	}
	// The runtime collects hard before the OS limit refuses it memory.
	debug.SetMemoryLimit(memory * 3 / 4)
	return memory, time.Duration(secs) * time.Second, nil
}

// warmUp runs a small program of every kind of step while the child
// waits for its own: the interpreter's code is in memory when it comes.
const warmUp = `
x = [str(i) + "x" for i in range(20)]
d = {"a": x, "b": 1.5, "c": None}
result = json.decode(json.encode(d))["a"][3]
r = attempt(tool, "warm-up")
p = parallel([call(tool, "warm-up")])
print(len(x), r.ok, p[0].ok)
`

type warmHost struct{}

func (warmHost) Do(_ context.Context, calls []Call) ([]Outcome, error) {
	return make([]Outcome, len(calls)), nil
}

func serveChild(r io.Reader, w io.Writer, memory int64, cpu time.Duration) error {
	_, _ = Run(context.Background(), warmUp, []Tool{{Name: "warm-up"}}, warmHost{}, Limits{})
	from := newLines(r, maxJob)
	enc := json.NewEncoder(w)
	for {
		from.max = maxJob
		line, err := from.next()
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil // the sandbox closed: no more programs
		}
		if err != nil {
			return fmt.Errorf("no program came: %w", err)
		}
		var job message
		if err := json.Unmarshal(line, &job); err != nil || job.Limits == nil {
			return fmt.Errorf("an unreadable job: %v", err)
		}
		from.max = maxLine(*job.Limits)
		// Each program has the whole CPU bound, whatever ran here before.
		if err := boundCPU(cpu); err != nil {
			return err
		}
		res, err := Run(context.Background(), job.Source, job.Tools, pipeHost{from: from, enc: enc}, *job.Limits)
		if err != nil {
			return err // the sandbox stopped answering: it ends the program
		}
		last := !fresh(memory, cpu)
		if err := enc.Encode(message{Result: &res, Last: last}); err != nil || last {
			return err
		}
	}
}

// fresh says whether a child may take another program: it has a
// program's CPU bound left under its hard limit, and its runtime holds
// less than a quarter of its
// memory bound (the OS bound counts what the runtime keeps mapped, freed
// or not, so a program that grew the heap would shrink the next one's).
func fresh(memory int64, cpu time.Duration) bool {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return cpuSpent()+2*cpu < cpuLives*cpu && int64(ms.Sys) < memory/4
}

// cpuLives is how many programs' CPU bounds a child may spend in all.
const cpuLives = 16

// cpuExceeded is what a child says when its program passed its CPU bound.
const cpuExceeded = "codemode child: CPU time limit exceeded"

// pipeHost is the host in a child: calls go up the pipe, outcomes come
// down.
type pipeHost struct {
	from *lines
	enc  *json.Encoder
}

func (h pipeHost) Do(_ context.Context, calls []Call) ([]Outcome, error) {
	if err := h.enc.Encode(message{Calls: calls}); err != nil {
		return nil, err
	}
	line, err := h.from.next()
	if err != nil {
		return nil, fmt.Errorf("the sandbox stopped answering: %w", err)
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	return m.Outcomes, nil
}
