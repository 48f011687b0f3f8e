// Package builtin holds the tools every lash-node offers: a durable sleep
// and waits for an approval or a signal. Each parks its call (the turn ends
// suspended and holds nothing) with a ticket saying what wakes it; a node's
// waker resumes the call with a decision when that happens (lash.Node.Wake),
// so the wait survives any crash and costs nothing while parked.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash/tools"
)

// The built-in tools' names.
const (
	SleepTool    = "sleep"
	ApprovalTool = "wait_for_approval"
	SignalTool   = "wait_for_signal"
)

// Names are the names of every built-in tool.
func Names() []string {
	return []string{SleepTool, ApprovalTool, SignalTool, ProcessStartTool, ProcessAwaitTool, ProcessCancelTool, ProcessListTool, SpawnAgentTool}
}

// Ticket prefixes. A ticket is "<kind> <argument>".
const (
	SleepTicket    = "sleep-until"
	ApprovalTicket = "approval"
	SignalTicket   = "signal"
)

// Ticket is a parsed ticket.
type Ticket struct {
	Kind string
	// Until is when a sleep ends.
	Until time.Time
	// Subject is the signal subject a signal wait listens on.
	Subject string
	// Process is the process a process wait waits for.
	Process string
	// Event, Deadline and MAC are an event wait's (EventTicket): the
	// event's id, when it times out (zero: never), and the node's
	// signature over both, so no other tool can forge one.
	Event    string
	Deadline time.Time
	MAC      string
	// Text is the ticket's argument as written.
	Text string
}

// ParseTicket reads a ticket written by this package.
func ParseTicket(s string) (Ticket, bool) {
	kind, arg, _ := strings.Cut(s, " ")
	t := Ticket{Kind: kind, Text: arg}
	switch kind {
	case SleepTicket:
		until, err := time.Parse(time.RFC3339Nano, arg)
		if err != nil {
			return t, false
		}
		t.Until = until
	case SignalTicket:
		if arg == "" {
			return t, false
		}
		t.Subject = arg
	case ProcessTicket:
		if arg == "" {
			return t, false
		}
		t.Process = arg
	case EventTicket:
		f := strings.Fields(arg)
		if len(f) != 3 {
			return t, false
		}
		t.Event, t.MAC = f[0], f[2]
		if f[1] != "-" {
			d, err := time.Parse(time.RFC3339Nano, f[1])
			if err != nil {
				return t, false
			}
			t.Deadline = d
		}
	case ApprovalTicket:
	default:
		return t, false
	}
	return t, true
}

// EventTicket parks a call until an external event (tools.AwaitEvent):
// "event <id> <deadline RFC 3339 or -> <signature>".
const EventTicket = "event"

// FormatEventTicket writes an event wait's ticket.
func FormatEventTicket(id string, deadline time.Time, mac string) string {
	d := "-"
	if !deadline.IsZero() {
		d = deadline.UTC().Format(time.RFC3339Nano)
	}
	return EventTicket + " " + id + " " + d + " " + mac
}

// MaxSleep caps one durable sleep.
const MaxSleep = 30 * 24 * time.Hour

// Sleep is the "sleep" tool: it parks the call until a time computed when
// the call first runs. The ticket, and so the wake time, is journaled with
// the call's outcome: a replay sleeps until the same moment.
func Sleep(now func() time.Time) tools.Tool {
	t, err := tools.Func(SleepTool, "Wait durably for a number of seconds before going on. The wait survives restarts and costs nothing while it lasts.",
		func(ctx context.Context, a struct {
			Seconds float64 `json:"seconds" jsonschema:"how long to wait, in seconds"`
		}) (string, error) {
			if info, ok := tools.Info(ctx); ok && info.Decision != nil {
				return "slept", nil
			}
			d := time.Duration(a.Seconds * float64(time.Second))
			if d <= 0 || d > MaxSleep {
				return "", fmt.Errorf("seconds must be more than 0 and at most %d", int(MaxSleep.Seconds()))
			}
			until := now().Add(d).UTC()
			return "", tools.Pending(SleepTicket + " " + until.Format(time.RFC3339Nano))
		})
	if err != nil {
		panic(err) // a fixed signature: cannot fail
	}
	return t
}

// Approval is the "wait_for_approval" tool: it parks the call until an
// operator decides it (lash-admin decide). Resumed without a payload, it
// answers "approved"; a payload given with the decision is the answer.
func Approval() tools.Tool {
	t, err := tools.Func(ApprovalTool, "Ask a human to approve something and wait until they decide. Returns their answer.",
		func(ctx context.Context, a struct {
			Request string `json:"request" jsonschema:"what needs approval, as the human will read it"`
		}) (string, error) {
			if info, ok := tools.Info(ctx); ok && info.Decision != nil {
				if info.Decision.Payload != "" {
					return info.Decision.Payload, nil
				}
				return "approved", nil
			}
			if strings.TrimSpace(a.Request) == "" {
				return "", errors.New("request must say what needs approval")
			}
			return "", tools.Pending(ApprovalTicket + " " + a.Request)
		})
	if err != nil {
		panic(err)
	}
	return t
}

// Signal is the "wait_for_signal" tool: it parks the call until a signal is
// published on <prefix>.signal.<name>; the signal's payload is the answer.
func Signal(prefix string) tools.Tool {
	t, err := tools.Func(SignalTool, "Wait until an external signal arrives and return its payload. Signals are published by other systems under a name.",
		func(ctx context.Context, a struct {
			Name string `json:"name" jsonschema:"the signal's name: dot-separated tokens of letters, digits, '-' and '_'"`
		}) (string, error) {
			if info, ok := tools.Info(ctx); ok && info.Decision != nil {
				return info.Decision.Payload, nil
			}
			if err := checkSignalName(a.Name); err != nil {
				return "", err
			}
			return "", tools.Pending(SignalTicket + " " + prefix + ".signal." + a.Name)
		})
	if err != nil {
		panic(err)
	}
	return t
}

// MaxSignalName bounds a signal's name: it goes into a subject, and a
// subject travels in the NATS protocol's control line.
const MaxSignalName = 256

func checkSignalName(name string) error {
	if name == "" {
		return errors.New("name is empty")
	}
	if len(name) > MaxSignalName {
		return fmt.Errorf("name of %d bytes: at most %d", len(name), MaxSignalName)
	}
	for _, tok := range strings.Split(name, ".") {
		if tok == "" {
			return fmt.Errorf("name %q has an empty token", name)
		}
		for _, c := range tok {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("name %q: %q is not allowed", name, c)
			}
		}
	}
	return nil
}

// Register adds the built-in tools to r.
func Register(r *tools.Registry, prefix string, now func() time.Time) error {
	return errors.Join(r.Register(Sleep(now)), r.Register(Approval()), r.Register(Signal(prefix)))
}
