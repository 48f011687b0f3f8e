package turn

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A tool round: the calls a model answer asks for are checked, run as a
// batch, and answered in the history, each by its result or a placeholder.

// MaxIDBytes is the longest id, and tool name, of a call the machine
// accepts from a model. Both come from the model and end up in NATS subject
// tokens and journal keys downstream, so their length must be bounded.
const MaxIDBytes = 256

// checkToolCalls refuses tool calls whose ids are empty, too long, repeated,
// or clash with a call the machine still tracks (decisions address calls by
// id), and calls whose tool names are empty or too long.
func (m *Machine) checkToolCalls(calls []ToolCall) error {
	seen := make(map[string]bool, len(calls))
	for _, c := range calls {
		// Length first: the other messages quote the id and name whole.
		switch {
		case len(c.ID) > MaxIDBytes:
			return fmt.Errorf("tool call id %s is %d bytes, longer than %d", quotePrefix(c.ID), len(c.ID), MaxIDBytes)
		case len(c.Name) > MaxIDBytes:
			return fmt.Errorf("tool name %s is %d bytes, longer than %d", quotePrefix(c.Name), len(c.Name), MaxIDBytes)
		case c.ID == "":
			return fmt.Errorf("tool call to %q has no id", c.Name)
		case c.Name == "":
			return fmt.Errorf("tool call %q names no tool", c.ID)
		case seen[c.ID]:
			return fmt.Errorf("tool call id %q is repeated", c.ID)
		}
		if i := m.findCall(c.ID); i >= 0 && m.st.Calls[i].Status == CallSuspended {
			return fmt.Errorf("tool call id %q is already in use by a suspended call", c.ID)
		}
		seen[c.ID] = true
	}
	return nil
}

// quotePrefix quotes the start of an over-long string, so that a refusal
// names it without copying all of it into the termination detail.
func quotePrefix(s string) string {
	const keep = 32
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// startRound gates each call and yields the batch of those allowed to run.
func (m *Machine) startRound(calls []ToolCall) {
	st := &m.st
	// Calls finished in earlier rounds are in the conversation; only
	// suspended ones stay tracked.
	st.Calls = slices.DeleteFunc(st.Calls, func(c callState) bool { return c.Status.Terminal() })
	st.Round++
	v := m.view()
	for _, call := range calls {
		c := callState{Call: call, Status: CallNew, Iteration: st.Iteration, Round: st.Round}
		g := Gate{Verdict: Allow}
		if !m.inOffer(call.Name) {
			g = Gate{Verdict: Block, Reason: fmt.Sprintf("unknown tool %q", call.Name)}
		} else if h := m.cfg.Hooks.BeforeTool; h != nil {
			g = h(v, call)
		}
		switch g.Verdict {
		case Block:
			c.Status = CallFailed
			c.Result = &ToolResult{CallID: call.ID, Status: ToolError, Output: "blocked: " + g.Reason}
			m.event(EventToolBlocked, call.ID, g.Reason)
		case Suspend:
			c.Status = CallSuspended
			c.Ticket = g.Ticket
			m.event(EventToolSuspended, call.ID, g.Ticket.Reason)
		default:
			m.run(&c)
		}
		st.Calls = append(st.Calls, c)
	}
	m.runRound()
}

// run marks a call to run in the current round: in its batch, or, for a
// program, after it, one program at a time. A program call whose argument
// is not a program fails here.
func (m *Machine) run(c *callState) {
	c.Status, c.Round, c.Result = CallRunning, m.st.Round, nil
	if !m.isProgram(c.Call) && c.Prog == nil { // a parked program is one, whatever the mode now
		c.Exec = true
		m.event(EventToolStarted, c.Call.ID, c.Call.Name)
		return
	}
	err := checkProgramCall(c.Call)
	if err != nil {
		c.Status, c.Prog = CallFailed, nil
		c.Result = &ToolResult{CallID: c.Call.ID, Status: ToolError, Output: err.Error()}
		m.event(EventToolBlocked, c.Call.ID, err.Error())
		return
	}
	if c.Prog == nil { // a parked program keeps its run
		c.Prog = &progState{}
	}
	m.event(EventToolStarted, c.Call.ID, c.Call.Name)
}

func (m *Machine) inCatalog(name string) bool {
	for _, t := range m.st.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// runRound yields the current round's batch, or its programs, or closes
// the round at once when no call of it needs to run.
func (m *Machine) runRound() {
	for _, c := range m.st.Calls {
		if c.Round == m.st.Round && c.Exec {
			m.yield(phaseTools)
			return
		}
	}
	m.nextProgram()
}

// checkToolResults validates a delivery against the outstanding batch and
// returns the results not yet recorded. Nothing is changed.
func (m *Machine) checkToolResults(r ToolResults) ([]ToolResult, error) {
	var fresh []ToolResult
	for _, res := range r.Results {
		i := m.findCall(res.CallID)
		if i < 0 || m.st.Calls[i].Round != m.st.Round || !m.st.Calls[i].Exec {
			return nil, fmt.Errorf("%w: call %q is not in batch %d", ErrInvalidResult, res.CallID, m.st.Out)
		}
		if res.Status < ToolOK || res.Status > ToolPending {
			return nil, fmt.Errorf("%w: call %q has unknown status %d", ErrInvalidResult, res.CallID, res.Status)
		}
		prev := m.st.Calls[i].Result
		if j := slices.IndexFunc(fresh, func(f ToolResult) bool { return f.CallID == res.CallID }); j >= 0 {
			prev = &fresh[j]
		}
		if prev != nil {
			if *prev != res {
				return nil, fmt.Errorf("%w: call %q already has a different result", ErrInvalidResult, res.CallID)
			}
			continue
		}
		fresh = append(fresh, res)
	}
	return fresh, nil
}

func (m *Machine) onToolResults(results []ToolResult) {
	st := &m.st
	for _, res := range results {
		c := &st.Calls[m.findCall(res.CallID)]
		c.Result = &res
		switch res.Status {
		case ToolOK:
			c.Status = CallSucceeded
			m.event(EventToolFinished, c.Call.ID, "ok")
		case ToolError:
			c.Status = CallFailed
			m.event(EventToolFinished, c.Call.ID, "error")
		case ToolPending:
			// The pending result stays recorded, so a repeat is a no-op
			// and any other answer for the call is refused.
			c.Status = CallSuspended
			c.Ticket = Ticket{Reason: res.Output}
			m.event(EventToolSuspended, c.Call.ID, res.Output)
		}
	}
	for _, c := range st.Calls {
		if c.Round == st.Round && c.Exec && c.Status == CallRunning {
			return
		}
	}
	for i := range st.Calls {
		st.Calls[i].Exec = false // the batch is over
	}
	m.nextProgram()
}

// closeRound answers every call of the round in the conversation, in the
// order the model asked for them, runs AfterTool, then yields the
// after-tools checkpoint.
func (m *Machine) closeRound() {
	st := &m.st
	var stop *StopRequest
	v := m.view()
	for i := range st.Calls {
		c := &st.Calls[i]
		if c.Round != st.Round {
			continue
		}
		c.Exec = false
		m.answer(c)
		switch c.Status {
		case CallFailed:
			st.Failures++
		case CallSucceeded:
			st.Failures = 0
		}
		if h := m.cfg.Hooks.AfterTool; h != nil && c.Result != nil {
			act := h(v, c.Call, *c.Result)
			m.emit(act.Emit)
			m.appendMessages(act.Messages)
			if stop == nil {
				stop = act.Stop
			}
		}
	}
	if stop != nil {
		m.finish(Termination{Reason: BehaviorRequested, Code: stop.Code, Detail: stop.Detail})
		return
	}
	st.At = AfterTools
	m.yield(phaseCheckpoint)
}

// answer appends the tool message for a call: its result if it ended, a
// pending placeholder if it is suspended.
func (m *Machine) answer(c *callState) {
	msg := Message{Role: RoleTool, CallID: c.Call.ID, Name: c.Call.Name}
	switch {
	case c.Status == CallSuspended:
		msg.Pending = true
		msg.Text = "awaiting decision"
		if c.Ticket.Reason != "" {
			msg.Text += ": " + c.Ticket.Reason
		}
		m.st.Messages = append(m.st.Messages, msg)
		return
	case c.Result != nil:
		c.Prog = nil
		msg.Text = c.Result.Output
		msg.Error = c.Status != CallSucceeded
	default:
		c.Prog = nil
		msg.Text, msg.Error = "cancelled", true
	}
	m.st.Messages = append(m.st.Messages, msg)
	m.st.Fresh++
}
