package lash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

// Processes is the deployment's process registry, writing as this node.
func (n *Node) Processes() *processes.Registry { return n.procs }

// ProcessTools are the model-facing process tools (process_start,
// process_await, process_cancel) for the node's tool registry: any tool
// of the node may be started in the background.
func (n *Node) ProcessTools() []tools.Tool {
	return builtin.ProcessTools(n.procs, func(name string) bool {
		_, ok := n.opts.tools.Get(name)
		return ok
	})
}

// RunProcesses runs the deployment's processes on this node until ctx ends
// or the node closes (processes.Worker, ADR 0021): background tool calls
// through the node's tools. When a process with a wake target ends, its
// session gets an input saying so, or its process_await call is resumed.
// Attempts running when it stops are handed back, or, for started
// owner-bound work, marked abandoned by the drain.
func (n *Node) RunProcesses(ctx context.Context) error {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return ErrClosed
	}
	n.wakers.Add(1)
	n.mu.Unlock()
	defer n.wakers.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(n.halt, cancel)()
	w := processes.NewWorker(processes.WorkerConfig{Registry: n.procs, Leases: n.leases, Store: n.client,
		Executor: processExecutor{n}, TTL: n.opts.leaseTTL, Concurrency: n.opts.concurrency, Logger: n.opts.logger,
		OnEnd: func(p *processes.Process, live bool) { n.processEnded(ctx, p, live) }})
	return w.Run(ctx)
}

type processExecutor struct{ n *Node }

// Execute runs a background tool call as the tool runs in a turn: with the
// call's deadline, and told when an earlier attempt may have run.
func (x processExecutor) Execute(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
	p := run.Process()
	in := p.Registration.Input
	if in.Kind != processes.ToolCall {
		return nil, &processes.ExecError{Code: "unsupported", Message: fmt.Sprintf("this node does not run %s processes", in.Kind)}
	}
	call := turn.PendingCall{
		Call: turn.ToolCall{ID: p.ID, Name: in.Tool, Arguments: string(in.Args)},
		Key:  turn.ReplayKey{Session: p.Registration.Provenance.Session, Turn: "proc:" + p.ID, Kind: turn.KindToolCall, Call: p.ID},
	}
	res, err := x.n.runner.Invoke(ctx, call, run.Attempt(), run.Attempt() > 1)
	if err != nil {
		return nil, err
	}
	switch res.Status {
	case turn.ToolOK:
		return json.Marshal(res.Output)
	case turn.ToolPending:
		return nil, &processes.ExecError{Code: "tool_parked", Message: "a background tool cannot wait for a decision: " + res.Output}
	}
	return nil, &processes.ExecError{Code: "tool_failed", Message: res.Output}
}

// processEnded tells the process's wake target: a process_await call
// parked on it is resumed with the outcome; without one, the session gets
// an input with the outcome, which starts a turn or joins the running one.
// Either is an input under the process's one wake key, so every node
// doing it for every process it sees end delivers it once.
func (n *Node) processEnded(ctx context.Context, p *processes.Process, live bool) {
	target := p.Registration.WakeTarget
	if target == "" {
		return
	}
	key := processWakeKey(p.ID)
	if n.proj != nil {
		if _, seen, err := n.proj.InputKey(target, key); err == nil && seen {
			return // told already (the common case for those read at start)
		}
		if calls, err := parkedIn(n.proj); err == nil {
			for _, pc := range calls {
				if pc.session == target && pc.ticket.Kind == builtin.ProcessTicket && pc.ticket.Process == p.ID {
					if err := n.wakeOnProcessEnd(ctx, pc, p); err != nil && ctx.Err() == nil {
						n.opts.logger.Warn("waking a process wait", "session", target, "process", p.ID, "err", err)
					}
					return
				}
			}
		}
	}
	text := fmt.Sprintf("[process %s (%s) %s] %s", p.ID, processName(p), p.Status(), builtin.ProcessOutcome(p))
	if _, _, err := n.Session(target).Send(ctx, key, Input{Text: text}); err != nil && ctx.Err() == nil {
		n.opts.logger.Warn("telling a session its process ended", "session", target, "process", p.ID, "live", live, "err", err)
	}
}

// wakeOnProcessEnd resumes a process_await call once its process ended,
// under the process's wake key; p, if known, saves reading it.
func (n *Node) wakeOnProcessEnd(ctx context.Context, pc parkedCall, p *processes.Process) error {
	if p == nil {
		var err error
		p, err = n.procs.Get(ctx, pc.ticket.Process)
		if errors.Is(err, processes.ErrUnknown) || errors.Is(err, processes.ErrInvalid) {
			return n.wake(ctx, pc, "no process "+pc.ticket.Process)
		}
		if err != nil {
			return err
		}
	}
	if !p.Ended() {
		return nil
	}
	key := processWakeKey(p.ID)
	if n.proj != nil {
		if _, used, err := n.proj.InputKey(pc.session, key); err == nil && used {
			// Told as an input before the call was parked: the call
			// still needs its answer, under a key of its own.
			key = wakeID(pc.call.ID)
		}
	}
	return n.wakeAs(ctx, pc, key, builtin.ProcessOutcome(p))
}

func processName(p *processes.Process) string {
	if p.Registration.Label != "" {
		return p.Registration.Label
	}
	switch in := p.Registration.Input; in.Kind {
	case processes.ToolCall:
		return "tool " + in.Tool
	case processes.SessionTurn:
		return "agent " + in.Session
	}
	return string(p.Registration.Input.Kind)
}

// processWakeKey is the input key of a process's end in its wake target,
// within the bound on keys.
func processWakeKey(pid string) string {
	if k := "process-end:" + pid; len(k) <= streams.MaxIDBytes {
		return k
	}
	sum := sha256.Sum256([]byte(pid))
	return "process-end:" + hex.EncodeToString(sum[:])
}
