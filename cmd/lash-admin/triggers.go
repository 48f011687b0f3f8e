package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/triggers"
	"github.com/oklog/ulid/v2"
)

// triggerFlags are the flags of the triggers commands.
type triggerFlags struct {
	source, tool, args, payloadArg, agent, wake, label, op, owner string
	every, cron                                                   string
	revision                                                      uint64
	open                                                          bool
}

func opFlag(a *app, fs *flag.FlagSet) {
	fs.StringVar(&a.trig.op, "op", "", "the operation's `id`: the same id again returns the first outcome (default: a new one, printed)")
}

func scopeFlag(a *app, fs *flag.FlagSet) {
	fs.StringVar(&a.trig.owner, "owner", "", "act as this owner: `host` or session:ID (default: an operator, who sees every subscription)")
}

var triggersLsCmd = &command{
	name:    "triggers ls",
	summary: "trigger subscriptions: what signals start what",
	doc: `Lists the trigger subscriptions on the TRIGGERS stream (<prefix>.trig.sub.<id>), each
as its newest state: id, owner, key, the signals it matches (<type>.<key pattern>
below <prefix>.signal.), what it starts, and whether it is enabled or deleted.
--owner lists one owner's only.`,
	flags: scopeFlag,
	run:   runTriggersLs,
}

var triggersShowCmd = &command{
	name:    "triggers show",
	args:    "SUBSCRIPTION",
	summary: "one subscription and every change made to it",
	doc:     `Shows a subscription's definition and its history: one state per change, with the operation that made it.`,
	min:     1, max: 1,
	flags: scopeFlag,
	run:   runTriggersShow,
}

var triggersRegisterCmd = &command{
	name:    "triggers register",
	args:    "KEY",
	summary: "subscribe to signals: start a tool or a sub-agent for each",
	doc: `Registers a subscription under KEY for its owner (--owner; default the host). Each
signal on <prefix>.signal.<source> is delivered to it once, as a process: a tool call
(--tool, with --args and the event under --payload-arg) or a sub-agent's task
(--agent INSTRUCTIONS, in a session of its own). --wake names a session told when the
process ends. Registering the same definition again changes nothing; another
definition under the same key is refused (register it under another key; delete the
old one if it should stop).`,
	min: 1, max: 1,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.trig.source, "source", "", "the signals to match: `TYPE[.KEY]` below <prefix>.signal. ('*' one token, '>' the rest)")
		fs.StringVar(&a.trig.tool, "tool", "", "start this `tool` for each signal")
		fs.StringVar(&a.trig.args, "args", "", "the tool's fixed arguments: a JSON `object`")
		fs.StringVar(&a.trig.payloadArg, "payload-arg", "", "the tool argument that receives the event (default \"event\"; \"-\": none)")
		fs.StringVar(&a.trig.agent, "agent", "", "start a sub-agent with these `instructions` for each signal")
		fs.StringVar(&a.trig.wake, "wake", "", "tell this `session` when each process ends")
		fs.StringVar(&a.trig.label, "label", "", "a `label` for the processes")
		scopeFlag(a, fs)
		opFlag(a, fs)
	},
	check: func(a *app, _ []string) error {
		_, err := a.triggerSpec()
		return err
	},
	run: runTriggersRegister,
}

func triggerAction(action, summary, doc string) *command {
	return &command{
		name: "triggers " + action, args: "SUBSCRIPTION", summary: summary, doc: doc, min: 1, max: 1,
		flags: func(a *app, fs *flag.FlagSet) {
			fs.Uint64Var(&a.trig.revision, "revision", 0, "change it only if it is at this `revision`")
			scopeFlag(a, fs)
			opFlag(a, fs)
		},
		run: func(a *app, args []string) error {
			return a.applyTrigger(triggers.Op{Action: action, Subscription: args[0]})
		},
	}
}

var (
	triggersEnableCmd = triggerAction(triggers.ActEnable, "deliver signals to a subscription again",
		`Enables a disabled subscription: signals stored from now on are delivered to it.`)
	triggersDisableCmd = triggerAction(triggers.ActDisable, "stop delivering signals to a subscription",
		`Disables a subscription: signals stored from now on are not delivered to it. Deliveries reserved
before go on.`)
	triggersDeleteCmd = triggerAction(triggers.ActDelete, "delete a subscription, keeping its history",
		`Deletes a subscription: a tombstone state ends its deliveries; its history stays. Revive brings it back.`)
	triggersReviveCmd = triggerAction(triggers.ActRevive, "bring a deleted subscription back",
		`Revives a deleted subscription as a new incarnation: signals stored from now on are delivered to it
again, each as a new delivery.`)
)

var triggersOccurrencesCmd = &command{
	name:    "triggers occurrences",
	summary: "signals recorded as occurrences, and their deliveries",
	doc: `Lists occurrences (<prefix>.trig.occ.<id>), oldest first: the signal's subject and
idempotency key (its Nats-Msg-Id, or seq:N without one), and the deliveries it was
matched into. --limit bounds the list.`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.IntVar(&a.limit, "limit", 1000, "list at most `n` occurrences")
	},
	run: runTriggersOccurrences,
}

var triggersDeliveriesCmd = &command{
	name:    "triggers deliveries",
	summary: "deliveries of occurrences to subscriptions, and their processes",
	doc: `Lists deliveries (<prefix>.trig.dlv.<id>), oldest first: occurrence, subscription (and
the incarnation and revision matched), the process it starts (same id) and whether
that process was registered. --open lists those not started yet: a node's sweep
starts them within seconds.`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.BoolVar(&a.trig.open, "open", false, "only deliveries whose process was not registered yet")
	},
	run: runTriggersDeliveries,
}

func (a *app) scope() (*triggers.Owner, error) {
	switch o := a.trig.owner; {
	case o == "":
		return nil, nil
	case o == "host":
		return &triggers.Owner{Kind: triggers.Host}, nil
	case strings.HasPrefix(o, "session:") && len(o) > len("session:"):
		return &triggers.Owner{Kind: triggers.Session, ID: strings.TrimPrefix(o, "session:")}, nil
	}
	return nil, a.usagef("--owner %q: give host or session:ID", a.trig.owner)
}

func (a *app) triggerSpec() (*triggers.Spec, error) {
	f := a.trig
	typ, key, _ := strings.Cut(f.source, ".")
	s := &triggers.Spec{SourceType: typ, SourceKey: key, WakeTarget: f.wake, Label: f.label}
	switch {
	case f.source == "":
		return nil, a.usagef("give --source TYPE[.KEY]")
	case (f.tool == "") == (f.agent == ""):
		return nil, a.usagef("give --tool or --agent (one of them)")
	case f.tool != "":
		s.Start = triggers.Target{Kind: processes.ToolCall, Tool: f.tool, PayloadArg: f.payloadArg}
		if f.args != "" {
			s.Start.Args = json.RawMessage(f.args)
		}
	default:
		if f.args != "" || f.payloadArg != "" {
			return nil, a.usagef("--args and --payload-arg go with --tool")
		}
		s.Start = triggers.Target{Kind: processes.SessionTurn, Instructions: f.agent}
	}
	op := triggers.Op{ID: "check", Action: triggers.ActRegister, Owner: triggers.Owner{Kind: triggers.Host}, Key: "check", Spec: s}
	if err := op.Validate(); err != nil {
		return nil, a.usagef("%s", strings.TrimPrefix(err.Error(), "triggers: invalid: "))
	}
	return s, nil
}

func runTriggersRegister(a *app, args []string) error {
	spec, err := a.triggerSpec()
	if err != nil {
		return err
	}
	scope, err := a.scope()
	if err != nil {
		return err
	}
	owner := triggers.Owner{Kind: triggers.Host}
	if scope != nil {
		owner = *scope
	}
	return a.applyTrigger(triggers.Op{Action: triggers.ActRegister, Owner: owner, Key: args[0], Spec: spec})
}

func (a *app) applyTrigger(op triggers.Op) error {
	scope, err := a.scope()
	if err != nil {
		return err
	}
	op.ID, op.Revision = a.trig.op, a.trig.revision
	if op.ID == "" {
		op.ID = "lash-admin-" + ulid.Make().String()
	}
	r, err := triggers.New(a.client, "lash-admin").Apply(a.ctx, op, scope)
	if errors.Is(err, triggers.ErrInvalid) {
		return a.usagef("%s", strings.TrimPrefix(err.Error(), "triggers: invalid: "))
	}
	if err != nil {
		return err
	}
	return a.emit(r, func(w io.Writer) {
		what := "changed"
		if !r.Changed {
			what = "unchanged"
		}
		row(w, r.Subscription, r.Action, what, fmt.Sprintf("revision %d", r.Revision), fmt.Sprintf("incarnation %d", r.Incarnation), "op "+r.Op)
	})
}

type subscriptionJSON struct {
	ID          string         `json:"id"`
	Owner       triggers.Owner `json:"owner"`
	Key         string         `json:"key"`
	Source      string         `json:"source"`
	Start       string         `json:"start"`
	WakeTarget  string         `json:"wake_target,omitempty"`
	State       string         `json:"state"`
	Revision    uint64         `json:"revision"`
	Incarnation uint64         `json:"incarnation"`
	Changed     time.Time      `json:"changed"`
}

func subscriptionRow(s *triggers.Subscription) subscriptionJSON {
	state := "enabled"
	switch {
	case s.Deleted:
		state = "deleted"
	case !s.Enabled:
		state = "disabled"
	}
	start := "tool " + s.Spec.Start.Tool
	if s.Spec.Start.Kind == processes.SessionTurn {
		start = "agent"
	}
	return subscriptionJSON{ID: s.ID, Owner: s.Owner, Key: s.Key, Source: s.Spec.Pattern(), Start: start, WakeTarget: s.Spec.WakeTarget,
		State: state, Revision: s.Revision, Incarnation: s.Incarnation, Changed: utc(s.At)}
}

func runTriggersLs(a *app, _ []string) error {
	scope, err := a.scope()
	if err != nil {
		return err
	}
	subs, bad, err := triggers.New(a.client, "lash-admin").List(a.ctx, scope)
	if err != nil {
		return err
	}
	out := struct {
		Subscriptions []subscriptionJSON `json:"subscriptions"`
		Unreadable    map[string]string  `json:"unreadable,omitempty"`
	}{Subscriptions: []subscriptionJSON{}}
	for _, s := range subs {
		out.Subscriptions = append(out.Subscriptions, subscriptionRow(s))
	}
	for subj, err := range bad {
		if out.Unreadable == nil {
			out.Unreadable = map[string]string{}
		}
		out.Unreadable[subj] = err.Error()
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "ID", "OWNER", "KEY", "SOURCE", "START", "WAKE", "STATE", "REVISION", "CHANGED")
		for _, s := range out.Subscriptions {
			row(w, s.ID, s.Owner.String(), s.Key, s.Source, s.Start, s.WakeTarget, s.State, s.Revision, fmtTime(s.Changed))
		}
		for subj, e := range out.Unreadable {
			row(w, subj, "unreadable", e)
		}
	})
}

func runTriggersShow(a *app, args []string) error {
	scope, err := a.scope()
	if err != nil {
		return err
	}
	h, err := triggers.New(a.client, "lash-admin").History(a.ctx, args[0], scope)
	if errors.Is(err, triggers.ErrNotFound) || errors.Is(err, triggers.ErrInvalid) {
		return fmt.Errorf("no subscription %q", args[0])
	}
	if err != nil {
		return err
	}
	cur := h[len(h)-1]
	out := struct {
		subscriptionJSON
		Spec    triggers.Spec            `json:"spec"`
		History []*triggers.Subscription `json:"history"`
	}{subscriptionRow(cur), cur.Spec, h}
	return a.emit(out, func(w io.Writer) {
		spec, _ := json.Marshal(cur.Spec.Start)
		row(w, "subscription", out.ID)
		row(w, "owner", out.Owner.String())
		row(w, "key", out.Key)
		row(w, "source", out.Source)
		row(w, "starts", string(spec))
		row(w, "wake target", out.WakeTarget)
		row(w, "state", fmt.Sprintf("%s, revision %d, incarnation %d", out.State, out.Revision, out.Incarnation))
		row(w, "")
		row(w, "REVISION", "ACTION", "OP", "BY", "AT")
		for _, s := range h {
			row(w, s.Revision, s.Action, s.Op, s.By, fmtTime(utc(s.At)))
		}
	})
}

func runTriggersOccurrences(a *app, _ []string) error {
	occs, err := triggers.New(a.client, "lash-admin").Occurrences(a.ctx, 0, a.limit)
	if err != nil {
		return err
	}
	out := struct {
		Occurrences []*triggers.Occurrence `json:"occurrences"`
	}{Occurrences: append([]*triggers.Occurrence{}, occs...)}
	return a.emit(out, func(w io.Writer) {
		row(w, "ID", "SUBJECT", "IDEMPOTENCY KEY", "DELIVERIES", "UNDELIVERED", "AT")
		for _, o := range occs {
			row(w, o.ID, o.Subject, o.IdempotencyKey, len(o.Deliveries), len(o.Undelivered), fmtTime(utc(o.At)))
		}
	})
}

type deliveryJSON struct {
	ID           string    `json:"id"`
	Occurrence   string    `json:"occurrence"`
	Subscription string    `json:"subscription"`
	Incarnation  uint64    `json:"incarnation"`
	Revision     uint64    `json:"revision"`
	Process      string    `json:"process"`
	Started      bool      `json:"started"`
	Error        string    `json:"error,omitempty"`
	Reserved     time.Time `json:"reserved"`
	ReservedBy   string    `json:"reserved_by"`
	StartedBy    string    `json:"started_by,omitempty"`
}

func runTriggersDeliveries(a *app, _ []string) error {
	ds, err := triggers.New(a.client, "lash-admin").Deliveries(a.ctx)
	if err != nil {
		return err
	}
	out := struct {
		Deliveries []deliveryJSON `json:"deliveries"`
	}{Deliveries: []deliveryJSON{}}
	for _, d := range ds {
		if a.trig.open && (d.Started || d.Failed != "") {
			continue
		}
		out.Deliveries = append(out.Deliveries, deliveryJSON{ID: d.ID, Occurrence: d.Occurrence, Subscription: d.Subscription,
			Incarnation: d.Incarnation, Revision: d.Revision, Process: d.Process, Started: d.Started, Error: d.Failed, Reserved: utc(d.At), ReservedBy: d.By, StartedBy: d.StartedBy})
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "ID", "OCCURRENCE", "SUBSCRIPTION", "PROCESS", "STARTED", "RESERVED", "ERROR")
		for _, d := range out.Deliveries {
			row(w, d.ID, d.Occurrence, d.Subscription, d.Process, d.Started, fmtTime(d.Reserved), d.Error)
		}
	})
}

var triggersScheduleCmd = &command{
	name:    "triggers schedule",
	args:    "NAME",
	summary: "fire a signal on a schedule: cron.NAME every interval or cron line",
	doc: `Stores (or changes) the schedule NAME: a JetStream message schedule on the TIMERS stream
that fires once per tick, whatever the number of nodes. Each tick is published as the
signal <prefix>.signal.cron.NAME ({"schedule", "at", "seq"}), with the tick's sequence as
its idempotency key: subscribe to it with --source cron.NAME. Give --every (at least
1s) or --cron (six fields, seconds first, UTC; or @hourly, @daily, @weekly, @monthly,
@yearly). A tick missed while no server ran fires once when it comes back.`,
	min: 1, max: 1,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.trig.every, "every", "", "fire every `duration` (at least 1s)")
		fs.StringVar(&a.trig.cron, "cron", "", "fire on this cron `line` (six fields, seconds first)")
	},
	check: func(a *app, _ []string) error {
		if (a.trig.every == "") == (a.trig.cron == "") {
			return a.usagef("give --every or --cron (one of them)")
		}
		return nil
	},
	run: func(a *app, args []string) error {
		pattern := a.trig.cron
		if a.trig.every != "" {
			pattern = "@every " + a.trig.every
		}
		err := triggers.SetSchedule(a.ctx, a.client, args[0], pattern)
		if errors.Is(err, triggers.ErrInvalid) {
			return a.usagef("%s", strings.TrimPrefix(err.Error(), "triggers: invalid: "))
		}
		if err != nil {
			return err
		}
		out := triggers.Schedule{Name: args[0], Pattern: pattern}
		return a.emit(out, func(w io.Writer) { row(w, "schedule", out.Name, out.Pattern) })
	},
}

var triggersUnscheduleCmd = &command{
	name:    "triggers unschedule",
	args:    "NAME",
	summary: "stop a schedule",
	doc:     `Removes the schedule NAME: it fires no more ticks. Ticks fired before are still delivered.`,
	min:     1, max: 1,
	run: func(a *app, args []string) error {
		if err := triggers.RemoveSchedule(a.ctx, a.client, args[0]); err != nil {
			return err
		}
		out := struct {
			Removed string `json:"removed"`
		}{args[0]}
		return a.emit(out, func(w io.Writer) { row(w, "removed", out.Removed) })
	},
}

var triggersSchedulesCmd = &command{
	name:    "triggers schedules",
	summary: "the schedules that fire signals",
	doc:     `Lists the schedules (name and pattern) stored on the TIMERS stream.`,
	run: func(a *app, _ []string) error {
		ss, err := triggers.Schedules(a.ctx, a.client)
		if err != nil {
			return err
		}
		out := struct {
			Schedules []triggers.Schedule `json:"schedules"`
		}{append([]triggers.Schedule{}, ss...)}
		return a.emit(out, func(w io.Writer) {
			row(w, "NAME", "PATTERN", "SIGNAL")
			for _, s := range ss {
				row(w, s.Name, s.Pattern, "cron."+s.Name)
			}
		})
	},
}
