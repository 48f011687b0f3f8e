package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Kind is what a workload session does in its first turn.
type Kind string

const (
	KindTool    Kind = "tool"    // one call of the counting tool
	KindApprove Kind = "approve" // waits for a person's decision
	KindSignal  Kind = "signal"  // waits for an external signal
	KindSleep   Kind = "sleep"   // a durable sleep on the node's timers
	KindProcess Kind = "process" // the counting tool as a background process, awaited
	KindAgent   Kind = "agent"   // a sub-agent that calls the counting tool, awaited
)

// Kinds lists every kind, in the order sessions take them.
var Kinds = []Kind{KindTool, KindApprove, KindSignal, KindSleep, KindProcess, KindAgent}

// Script is the model of the workload, for testenv's model server: each
// session's first input names its kind in brackets, and the second is
// plain chat.
const Script = `
rule tool-call
  when user contains [tool]
  when tools = 0
  call count {"tag":"tool"}
rule tool-answer
  when user contains [tool]
  say counted

rule approve-call
  when user contains [approve]
  when tools = 0
  call wait_for_approval {"request":"go ahead?"}
rule approve-answer
  when user contains [approve]
  say approved

rule signal-call
  when user contains [signal]
  when tools = 0
  call wait_for_signal {"name":"chaos.go"}
rule signal-answer
  when user contains [signal]
  say signalled

rule sleep-call
  when user contains [sleep]
  when tools = 0
  call sleep {"seconds":1}
rule sleep-answer
  when user contains [sleep]
  say rested

rule process-start
  when user contains [process]
  when tools = 0
  call process_start {"tool":"count","args":{"tag":"process"},"name":"p"}
rule process-await
  when user contains [process]
  when tools = 1
  call process_await {"process":"p"}
rule process-answer
  when user contains [process]
  say processed

rule agent-spawn
  when user contains [agent]
  when tools = 0
  call spawn_agent {"task":"[subtask] count once","tools":["count"],"name":"a"}
rule agent-await
  when user contains [agent]
  when tools = 1
  call process_await {"process":"a"}
rule agent-answer
  when user contains [agent]
  say delegated

rule subtask-call
  when user contains [subtask]
  when tools = 0
  call count {"tag":"agent"}
rule subtask-answer
  when user contains [subtask]
  say sub done

default
  say ok
`

// Execution is one run of the counting tool, as the tool saw it.
type Execution struct {
	Key     string
	Tag     string
	Event   string
	Attempt int
	InDoubt bool
	Start   time.Time
}

// Counter serves the counting tool over NATS and keeps every execution:
// the checker compares them with what the journal recorded.
type Counter struct {
	mu   sync.Mutex
	runs []Execution
	svc  micro.Service
}

const countSchema = `{"type":"object","properties":{"tag":{"type":"string"},"event":{}},"required":["tag"],"additionalProperties":false}`

// ServeCounter serves the "count" tool on nc.
func ServeCounter(nc *nats.Conn) (*Counter, error) {
	c := &Counter{}
	svc, err := natstool.Serve(nc, "lash", micro.Config{Name: "chaos-count", Version: "1.0.0"}, natstool.Served{
		Name:        "count",
		Description: "Counts one execution under the call's idempotency key.",
		Schema:      json.RawMessage(countSchema),
		Handle: func(ctx context.Context, req natstool.Request) (string, error) {
			var a struct {
				Tag   string          `json:"tag"`
				Event json.RawMessage `json:"event"`
			}
			_ = json.Unmarshal(req.Args, &a)
			c.mu.Lock()
			c.runs = append(c.runs, Execution{Key: req.IdempotencyKey, Tag: a.Tag, Event: string(a.Event),
				Attempt: req.Attempt, InDoubt: req.InDoubt, Start: time.Now()})
			c.mu.Unlock()
			return "counted " + a.Tag, nil
		},
	})
	c.svc = svc
	return c, err
}

// Executions lists the executions so far.
func (c *Counter) Executions() []Execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Execution(nil), c.runs...)
}

// Session is one workload session: what its client sent and saw.
type Session struct {
	ID   string
	Kind Kind
	// Inputs are the messages and decisions the client had acknowledged:
	// subject kind ("in", "decide") and stream sequence.
	Inputs []Sent
	// Retries counts publishes the client sent again after a timeout.
	Retries int
	// Err says why the client gave up, empty if the session finished.
	Err string
	// Done is when the session's last turn was committed.
	Done time.Time
}

// Sent is one acknowledged publish of a client.
type Sent struct {
	Subject string
	Key     string
	Text    string
	Seq     uint64
	// At is when the client had the acknowledgement.
	At time.Time
}

// Workload runs sessions as clients do: it publishes inputs with
// idempotency keys and publishes them again after a timeout, decides and
// signals once a turn waits, and waits for each turn to commit.
type Workload struct {
	// NoKeys publishes inputs without Nats-Msg-Id (a check of the check).
	NoKeys bool
	// AckTimeout is how long a publish waits for its acknowledgement
	// before it is sent again.
	AckTimeout time.Duration
	nc         *nats.Conn
	insp       *lash.Inspector
	rng        *rand.Rand
	timeout    time.Duration

	mu       sync.Mutex
	sessions []*Session
	triggers []Sent
}

// NewWorkload drives sessions through nc (a connection the faults leave
// alone) and watches them through insp. seed picks the kinds' order and
// the clients' pauses; timeout bounds each session.
func NewWorkload(nc *nats.Conn, insp *lash.Inspector, seed uint64, timeout time.Duration) *Workload {
	return &Workload{nc: nc, insp: insp, rng: rand.New(rand.NewPCG(seed, 7)), timeout: timeout, AckTimeout: 2 * time.Second}
}

// Sessions lists the sessions run so far.
func (w *Workload) Sessions() []*Session {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*Session(nil), w.sessions...)
}

// Triggered lists the acknowledged signals meant for the trigger
// subscription.
func (w *Workload) Triggered() []Sent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Sent(nil), w.triggers...)
}

// Run runs n sessions, at most par at once, and returns when all have
// finished or given up.
func (w *Workload) Run(ctx context.Context, prefix string, n, par int) {
	w.run(ctx, nil, prefix, n, par)
}

// RunUntil starts sessions, par at once, until stop is closed, and
// returns when the sessions started have finished or given up.
func (w *Workload) RunUntil(ctx context.Context, stop <-chan struct{}, prefix string, par int) {
	w.run(ctx, stop, prefix, -1, par)
}

func (w *Workload) run(ctx context.Context, stop <-chan struct{}, prefix string, n, par int) {
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := 0; n < 0 || i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || closed(stop) {
			break
		}
		s := &Session{ID: fmt.Sprintf("%s-%04d", prefix, i), Kind: Kinds[i%len(Kinds)]}
		w.mu.Lock()
		w.sessions = append(w.sessions, s)
		w.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, w.timeout)
			defer cancel()
			if err := w.session(sctx, s); err != nil {
				s.Err = err.Error()
			} else {
				s.Done = time.Now()
			}
		}()
	}
	wg.Wait()
}

func (w *Workload) session(ctx context.Context, s *Session) error {
	first := fmt.Sprintf("[%s] %s #1", s.Kind, s.ID)
	seq, err := w.send(ctx, s, "in", s.ID+"/1", first, mustJSON(map[string]string{"text": first}))
	if err != nil {
		return err
	}
	switch s.Kind {
	case KindApprove:
		if err := w.waitTurn(ctx, s, seq, "waiting"); err != nil {
			return err
		}
		d := `{"decisions":[{"id":"d1","call_id":"call_1","action":"resume","mode":"use-result","payload":"yes"}]}`
		if seq, err = w.send(ctx, s, "decide", s.ID+"/d1", "", []byte(d)); err != nil {
			return err
		}
	case KindSignal:
		// The call takes the latest signal on its subject, which another
		// session may have sent already: then the turn does not wait.
		status, err := w.waitTurnAny(ctx, s, seq, "waiting", "done")
		if err != nil {
			return err
		}
		if status == "done" {
			break
		}
		if _, err := w.publish(ctx, s, "lash.signal.chaos.go", "sig-"+s.ID, mustJSON(map[string]string{"from": s.ID})); err != nil {
			return err
		}
	}
	if err := w.waitTurn(ctx, s, seq, "done"); err != nil {
		return err
	}
	second := fmt.Sprintf("[chat] %s #2", s.ID)
	if seq, err = w.send(ctx, s, "in", s.ID+"/2", second, mustJSON(map[string]string{"text": second})); err != nil {
		return err
	}
	return w.waitTurn(ctx, s, seq, "done")
}

// Trigger publishes a signal the trigger subscription matches.
func (w *Workload) Trigger(ctx context.Context, n int) error {
	key := fmt.Sprintf("trig-%d", n)
	s := &Session{}
	seq, err := w.publish(ctx, s, "lash.signal.chaosjob."+fmt.Sprint(n), key, mustJSON(map[string]int{"n": n}))
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.triggers = append(w.triggers, Sent{Subject: "chaosjob", Key: key, Seq: seq, At: time.Now()})
	w.mu.Unlock()
	return nil
}

func (w *Workload) send(ctx context.Context, s *Session, kind, key, text string, data []byte) (uint64, error) {
	seq, err := w.publish(ctx, s, "lash.sess."+s.ID+"."+kind, key, data)
	if err == nil {
		w.mu.Lock()
		s.Inputs = append(s.Inputs, Sent{Subject: kind, Key: key, Text: text, Seq: seq, At: time.Now()})
		w.mu.Unlock()
	}
	return seq, err
}

// publish is a JetStream publish as a client makes it: on a timeout or a
// lost connection it publishes again under the same Nats-Msg-Id, which the
// stream dedupes, until acknowledged or ctx ends.
func (w *Workload) publish(ctx context.Context, s *Session, subject, key string, data []byte) (uint64, error) {
	for attempt := 0; ; attempt++ {
		m := nats.NewMsg(subject)
		if !w.NoKeys || !strings.HasPrefix(subject, "lash.sess.") {
			m.Header.Set("Nats-Msg-Id", key)
		}
		m.Data = data
		actx, cancel := context.WithTimeout(ctx, w.AckTimeout)
		reply, err := w.nc.RequestMsgWithContext(actx, m)
		cancel()
		if err == nil {
			var ack struct {
				Seq   uint64 `json:"seq"`
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if jerr := json.Unmarshal(reply.Data, &ack); jerr == nil && ack.Error == nil && ack.Seq > 0 {
				return ack.Seq, nil
			} else if jerr == nil && ack.Error != nil {
				err = errors.New(ack.Error.Description)
			} else {
				err = fmt.Errorf("ack %q", reply.Data)
			}
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("publish %s (%s): %d attempts, last: %v", subject, key, attempt+1, err)
		}
		s.Retries++
		w.pause(ctx, 100*time.Millisecond)
	}
}

// waitTurn waits until a committed turn consumed input seq and the
// session's last commit has the status.
func (w *Workload) waitTurn(ctx context.Context, s *Session, seq uint64, status string) error {
	_, err := w.waitTurnAny(ctx, s, seq, status)
	return err
}

// waitTurnAny is waitTurn for any of statuses, and says which.
func (w *Workload) waitTurnAny(ctx context.Context, s *Session, seq uint64, statuses ...string) (string, error) {
	var last string
	for {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		turns, err := w.insp.Turns(rctx, s.ID)
		cancel()
		if err == nil && len(turns) > 0 {
			t := turns[len(turns)-1]
			if t.Cursor >= seq && slices.Contains(statuses, t.Status) {
				return t.Status, nil
			}
			last = fmt.Sprintf("last turn %s status %s cursor %d", t.Turn, t.Status, t.Cursor)
			if t.Failed {
				return "", fmt.Errorf("turn %s failed: %s", t.Turn, t.Termination.Detail)
			}
		} else if err != nil {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("waiting for %s after input %d: %s", strings.Join(statuses, " or "), seq, last)
		}
		w.pause(ctx, 250*time.Millisecond)
	}
}

func (w *Workload) pause(ctx context.Context, d time.Duration) {
	w.mu.Lock()
	d += time.Duration(w.rng.Int64N(int64(d)))
	w.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// sessionOfRequest finds the workload session a model request belongs to
// by the id its first user message names; "" for a sub-agent's.
func sessionOfRequest(texts []string) string {
	for _, t := range texts {
		if !strings.HasPrefix(t, "[") {
			continue
		}
		f := strings.Fields(t)
		if len(f) >= 2 && f[0] != "[subtask]" {
			return f[1]
		}
		return ""
	}
	return ""
}
