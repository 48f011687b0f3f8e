package lash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

// Processes is the deployment's process registry, writing as this node.
func (n *Node) Processes() *processes.Registry { return n.procs }

// Tools is the node's tool registry.
func (n *Node) Tools() *tools.Registry { return n.opts.tools }

// ProcessTools are the model-facing process tools (process_start,
// process_await, process_cancel, spawn_agent, and process_list with
// WithProjection) for the node's tool registry: any tool of the node may
// be started in the background.
func (n *Node) ProcessTools() []tools.Tool {
	var list builtin.Lister
	if n.procProj != nil {
		list = func(ctx context.Context, session string) ([]*processes.Process, error) {
			last, err := n.client.LastSeq(ctx, streams.Processes)
			if err != nil {
				return nil, err
			}
			if err := n.procProj.WaitFor(ctx, last); err != nil {
				return nil, err
			}
			return n.procProj.ProcessesOf(session)
		}
	}
	budget := processes.DefaultBudget
	if n.opts.agents != nil {
		budget = *n.opts.agents
	}
	return builtin.ProcessTools(n.procs, func(name string) bool {
		_, ok := n.opts.tools.Get(name)
		return ok
	}, list, budget)
}

// RunProcesses runs the deployment's processes on this node until ctx ends
// or the node closes (processes.Worker, ADR 0021): background tool calls
// through the node's tools. When a process with a wake target ends, its
// session gets an input saying so, or its process_await call is resumed.
// Attempts running when it stops are handed back, or, for started
// owner-bound work, marked abandoned by the drain.
func (n *Node) RunProcesses(ctx context.Context) error {
	ctx, done, err := n.sideLoop(ctx)
	if err != nil {
		return err
	}
	defer done()
	// Ends are told off the worker's reading loop, in order; a full queue
	// holds the reader back.
	type end struct {
		p    *processes.Process
		live bool
	}
	// The channel is never closed: the worker's reader may still be
	// handing an end over when Run returns. Ends left when the teller
	// stops are told by the nodes that read them at their start.
	ends := make(chan end, 256)
	tctx, stopTelling := context.WithCancel(ctx)
	told := make(chan struct{})
	go func() {
		defer close(told)
		for {
			select {
			case e := <-ends:
				n.processEnded(tctx, e.p, e.live)
			case <-tctx.Done():
				return
			}
		}
	}()
	w := processes.NewWorker(processes.WorkerConfig{Registry: n.procs, Leases: n.leases, Store: n.client,
		Executor: processExecutor{n}, Sweep: n.opts.leaseTTL, Concurrency: n.opts.concurrency, Logger: n.opts.logger,
		Class: processClass,
		OnEnd: func(p *processes.Process, live bool) {
			select {
			case ends <- end{p, live}:
			case <-tctx.Done():
			}
		}})
	n.worker.Store(w)
	if n.lapsed.Load() {
		w.Lapsed()
	}
	err = w.Run(ctx)
	n.worker.CompareAndSwap(w, nil)
	stopTelling()
	<-told
	return err
}

// agentSlots bounds the sub-agents' attempts a node follows at once.
const agentSlots = 256

// processClass puts the attempts at each tool in a pool of their own, so
// a tool that hangs holds only its own slots (--concurrency of them), and
// sub-agents' attempts in one more: each follows its session, whose turns
// the dispatch runs, and may wait long (for an approval) doing nothing.
func processClass(p *processes.Process) (string, int) {
	if in := p.Registration.Input; in.Kind == processes.ToolCall {
		return "tool:" + in.Tool, 0
	}
	return "agents", agentSlots
}

type processExecutor struct{ n *Node }

// Execute runs a background tool call as the tool runs in a turn: with the
// call's deadline, and told when an earlier attempt may have run.
func (x processExecutor) Execute(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
	p := run.Process()
	in := p.Registration.Input
	switch in.Kind {
	case processes.SessionTurn:
		return x.agentTurn(ctx, p)
	case processes.ToolCall:
		if in.Tool == BackgroundProgramTool {
			return x.n.runBackgroundProgram(ctx, run)
		}
	default:
		return nil, &processes.ExecError{Code: "unsupported", Message: fmt.Sprintf("this node does not run %s processes", in.Kind)}
	}
	call := turn.PendingCall{
		Call: turn.ToolCall{ID: p.ID, Name: in.Tool, Arguments: string(in.Args)},
		Key:  turn.ReplayKey{Session: p.Registration.Provenance.Session, Turn: "proc:" + p.ID, Kind: turn.KindToolCall, Call: p.ID},
	}
	res, err := x.n.runner.Invoke(x.n.toolContext(ctx), call, run.Attempt(), run.Attempt() > 1)
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
	if in := p.Registration.Input; in.Kind == processes.SessionTurn && p.Status() == processes.Cancelled {
		// However it was cancelled (its attempt stopped, or recovery
		// cancelled it unrun), the sub-agent's turn stops too.
		if _, _, err := n.Session(in.Session).Send(ctx, agentCancelKey(p.ID), Input{Cancel: true}); err != nil && ctx.Err() == nil {
			n.opts.logger.Warn("cancelling a sub-agent's turn", "session", in.Session, "err", err)
		}
	}
	target := p.WakesTarget()
	if n.proj != nil {
		// Other sessions that may address the process may await it too:
		// only a call parked on it is told.
		for _, s := range p.Grants {
			if s != target {
				n.wakeAwaits(ctx, s, p)
			}
		}
	}
	if target == "" {
		return // none, or its grant was revoked
	}
	if !live && n.proj == nil {
		return // read at start, with no read model to say whether it was told: the nodes that saw it end told it
	}
	key := processWakeKey(p.ID)
	if n.proj != nil {
		if _, seen, err := n.proj.InputKey(target, key); err == nil && seen {
			return // told already (the common case for those read at start)
		}
		if calls, err := n.parkedOf(ctx, target); err == nil {
			for _, pc := range calls {
				if pc.ticket.Kind == builtin.ProcessTicket && pc.ticket.Process == p.ID {
					if err := n.wakeOnProcessEnd(ctx, pc, p); err != nil && ctx.Err() == nil {
						n.opts.logger.Warn("waking a process wait", "session", target, "process", p.ID, "err", err)
					}
					return
				}
			}
		}
	}
	if stoppedTree(p) {
		return // the stop ended the parent's turn too: no new turn is started to tell it
	}
	text := fmt.Sprintf("[process %s (%s) %s] %s", p.ID, processName(p), p.Status(), builtin.ProcessOutcome(p))
	if _, _, err := n.Session(target).Send(ctx, key, Input{Notice: text}); err != nil && ctx.Err() == nil {
		n.opts.logger.Warn("telling a session its process ended", "session", target, "process", p.ID, "live", live, "err", err)
	}
}

// wakeAwaits resumes the process_await calls session holds parked on the
// ended process p.
func (n *Node) wakeAwaits(ctx context.Context, session string, p *processes.Process) {
	calls, err := n.parkedOf(ctx, session)
	if err != nil && ctx.Err() == nil {
		n.opts.logger.Warn("finding process waits", "session", session, "process", p.ID, "err", err)
	}
	for _, pc := range calls {
		if pc.ticket.Kind == builtin.ProcessTicket && pc.ticket.Process == p.ID {
			if err := n.wakeOnProcessEnd(ctx, pc, p); err != nil && ctx.Err() == nil {
				n.opts.logger.Warn("waking a process wait", "session", session, "process", p.ID, "err", err)
			}
		}
	}
}

// wakeOnProcessEnd resumes a process_await call once its process ended,
// under the process's wake key when that tells the wake target once; p,
// if known, saves reading it (a recheck timer's call does not know it).
func (n *Node) wakeOnProcessEnd(ctx context.Context, pc parkedCall, p *processes.Process) error {
	recheck := p == nil
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
	switch {
	case recheck || pc.pending || pc.session != p.WakesTarget():
		// The end may have been told as a text input still waiting (the
		// call parked after the teller looked), or this session is not
		// the one told: a decision under the process's key would be
		// refused as that key's other content. The call's own key is
		// the call's alone (the model may hear of the end twice).
		key = wakeID(pc.waits)
	case n.proj != nil:
		if _, used, err := n.proj.InputKey(pc.session, key); err == nil && used {
			// Told as an input before the call was parked: the call
			// still needs its answer, under a key of its own.
			key = wakeID(pc.waits)
		}
	}
	return n.wakeAs(ctx, pc, key, builtin.ProcessOutcome(p))
}

// agentTurn runs a sub-agent: its task is an input of its own session,
// run like any other (by whichever node's dispatch takes it, with the
// same crash recovery), and its result is the final answer of the turn
// that took the task, or of the first turn after it that did not end
// suspended. A re-run finds the task's input there (its key is the
// process's) and the committed turn, and calls no model again.
func (x processExecutor) agentTurn(ctx context.Context, p *processes.Process) (json.RawMessage, error) {
	n := x.n
	child := p.Registration.Input.Session
	s := n.Session(child)
	seq, _, err := s.Send(ctx, agentTaskKey(p.ID), Input{Text: p.Registration.Input.Instructions, Agent: p.Registration.Input.Agent})
	if errors.Is(err, ErrBadInput) {
		return nil, &processes.ExecError{Code: "bad_task", Message: err.Error()}
	}
	if err != nil {
		return nil, processes.Retryable(err)
	}
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(context.Cause(ctx), processes.ErrCancelRequested) {
			return // handed back: the turn goes on, and the next attempt waits for it
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), streams.DefaultTimeout)
		defer cancel()
		if _, _, err := s.Send(cctx, agentCancelKey(p.ID), Input{Cancel: true}); err != nil {
			n.opts.logger.Warn("cancelling a sub-agent's turn", "session", child, "err", err)
		}
	})
	defer stop()
	o, err := n.outcomeAfter(ctx, child, seq)
	var xe *processes.ExecError
	if err != nil && !errors.As(err, &xe) && ctx.Err() == nil {
		return nil, processes.Retryable(err)
	}
	if err != nil {
		return nil, err
	}
	switch o.Termination.Reason {
	case turn.Cancelled:
		return nil, &processes.ExecError{Code: "agent_cancelled", Message: o.Termination.String()}
	case turn.Error:
		return nil, &processes.ExecError{Code: "agent_failed", Message: o.Termination.String()}
	}
	answer := ""
	for _, m := range o.Messages {
		if m.Role == turn.RoleAssistant && m.Text != "" {
			answer = m.Text
		}
	}
	return json.Marshal(answer)
}

// outcomeAfter follows a session's log until the turn that took input seq
// has ended, or a turn after it did, unsuspended, and returns its outcome.
// An input refused is an error; one consumed as the duplicate of an
// earlier input is answered by that input's turn.
func (n *Node) outcomeAfter(ctx context.Context, session string, seq uint64) (*turn.Outcome, error) {
	subj, err := n.client.Subjects().SessionEvents(session)
	if err != nil {
		return nil, err
	}
	var (
		took   bool
		out    *turn.Outcome
		fail   error
		origin uint64
	)
	errDone := errors.New("done")
	err = n.client.Tail(ctx, streams.Sessions, []string{subj}, 1, func(m *streams.Msg, _ uint64) error {
		e, err := sessionlog.DecodeEntry(m.Data)
		if err != nil || e.Kind == sessionlog.KindFence {
			return nil
		}
		body, err := n.log.Body(ctx, session, e)
		if err != nil {
			return err
		}
		var uses []sessionlog.InputUse
		var o *turn.Outcome
		if e.Kind == sessionlog.KindCommit {
			tb, err := sessionlog.DecodeTurnBody(body)
			if err != nil {
				return nil
			}
			uses, o = tb.Inputs, &tb.Outcome
		} else if cb, err := sessionlog.DecodeConsumeBody(body); err == nil {
			uses = cb.Inputs
		}
		for _, u := range uses {
			switch {
			case u.Seq != seq:
			case u.Duplicate != 0 && u.Duplicate < seq:
				// A re-run's task appended again: the turn that took the
				// first one is the answer.
				origin = u.Duplicate
				return errDone
			case u.Refused != "":
				fail = &processes.ExecError{Code: "bad_task", Message: "the task was not taken: " + u.Refused}
				return errDone
			default:
				took = true
			}
		}
		if took && o != nil && o.Termination.Reason != turn.Suspended {
			out = o
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) && origin != 0 {
		return n.outcomeAfter(ctx, session, origin) // an earlier input: this ends
	}
	if errors.Is(err, errDone) {
		return out, fail
	}
	return nil, err
}

// maxAgentsCached bounds the sub-agent registrations a node keeps.
const maxAgentsCached = 4096

func agentTaskKey(pid string) string   { return "agent-task:" + pid }
func agentCancelKey(pid string) string { return "agent-cancel:" + pid }

// toolSpecs is the catalog a session's turns are offered: the node's
// tools, or a sub-agent's share of them.
func (n *Node) toolSpecs(ctx context.Context, session string) ([]turn.ToolSpec, error) {
	specs := n.opts.tools.Specs()
	if !builtin.IsProcessID(session) {
		return specs, nil
	}
	n.agentsMu.Lock()
	agent := n.agents[session]
	n.agentsMu.Unlock()
	if agent == nil {
		var err error
		if agent, err = builtin.AgentOf(ctx, n.procs, session); err != nil || agent == nil {
			return specs, err
		}
		// Registrations never change. Only what picks the tools is kept:
		// the rest (the task, up to a process's input bound, and any
		// outcome read) would make the cache's 4096 entries hundreds of
		// MiB.
		in := agent.Registration.Input
		agent = &processes.Process{ID: agent.ID, Registration: processes.Registration{
			Input: processes.Input{Kind: in.Kind, Session: in.Session, Depth: in.Depth, Tools: in.Tools}}}
		n.agentsMu.Lock()
		if n.agents == nil || len(n.agents) >= maxAgentsCached {
			n.agents = map[string]*processes.Process{}
		}
		n.agents[session] = agent
		n.agentsMu.Unlock()
	}
	return builtin.AgentTools(agent, specs), nil
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

// stoppedWithParent is the cancel reason of a sub-agent whose spawning
// turn was stopped: its end wakes no one (the stop meant the whole tree).
const stoppedWithParent = "the turn that spawned it was stopped"

// stopSubAgents cancels the sub-agents a stopped turn spawned that are
// still running, found by its spawn_agent results: a stop ends the whole
// tree, not only its root. A crash before it does leaves them running
// (the parent's commit says it was stopped; `lash-admin processes cancel`
// ends them).
func (n *Node) stopSubAgents(ctx context.Context, session, turnID string, msgs []turn.Message) {
	for _, m := range msgs {
		if m.Role != turn.RoleTool || m.Name != builtin.SpawnAgentTool || m.Error || m.Pending {
			continue
		}
		var out struct {
			Process string `json:"process"`
		}
		if json.Unmarshal([]byte(m.Text), &out) != nil || !builtin.IsProcessID(out.Process) {
			continue
		}
		p, err := n.procs.Get(ctx, out.Process)
		if err != nil {
			n.opts.logger.Warn("reading a stopped turn's sub-agent", "session", session, "turn", turnID, "process", out.Process, "err", err)
			continue
		}
		prov := p.Registration.Provenance
		if p.Ended() || prov.Session != session || prov.Turn != turnID {
			continue // ended, or spawned by an earlier turn under the same name
		}
		if _, err := n.procs.RequestCancel(ctx, p.ID, stoppedWithParent); err != nil && !errors.Is(err, processes.ErrTerminal) {
			n.opts.logger.Warn("stopping a sub-agent", "session", session, "turn", turnID, "process", p.ID, "err", err)
		}
	}
}

// stoppedTree says whether p was cancelled because its spawning turn was
// stopped.
func stoppedTree(p *processes.Process) bool {
	if p.Status() != processes.Cancelled || p.CancelRequested == nil {
		return false
	}
	var r processes.Request
	return json.Unmarshal(p.CancelRequested.Data, &r) == nil && r.Reason == stoppedWithParent
}
