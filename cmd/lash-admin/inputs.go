package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/oklog/ulid/v2"
)

func keyFlag(a *app, fs *flag.FlagSet) {
	fs.StringVar(&a.key, "key", "", "idempotency `key`: sending again with the same key within the dedupe window appends nothing (default: a fresh ULID)")
}

var sendCmd = &command{
	name:    "send",
	args:    "ID TEXT",
	summary: "append a user message to a session's inputs",
	doc: `Appends a user message to the session's inputs (<prefix>.sess.<ID>.in); a node runs a
turn for it. The session need not exist: a first input starts it. TEXT "-" reads the
message from stdin. Prints the input's sequence, and whether it was a duplicate of an
earlier append with the same --key. With --wait it prints instead the answer of the turn
that consumes the input once that turn is committed (its last assistant text; the turn,
its status and how it ended on stderr, or all of it with --json), and fails if the input
is consumed without a turn or not within --wait-timeout. --agent binds the session to an
agent ("name", or "name@N" to pin revision N) with this message; the agent must exist.
--label KEY=VALUE labels a session with its first message.`,
	min: 2, max: 2,
	flags: func(a *app, fs *flag.FlagSet) {
		keyFlag(a, fs)
		fs.BoolVar(&a.wait, "wait", false, "wait for the turn that consumes the input and print its answer")
		fs.DurationVar(&a.waitTimeout, "wait-timeout", 10*time.Minute, "how long --wait waits")
		fs.StringVar(&a.sendAgent, "agent", "", "bind the session to the `agent` (name, or name@N to pin a revision) with this message")
		fs.Var(&a.labels, "label", "label the session `KEY=VALUE` with its first message (repeat for several)")
	},
	check: checkSend,
	run:   runSend,
}

func runSend(a *app, args []string) error {
	if !a.wait {
		return a.appendInput(args[0])
	}
	// The live events from here on: a commit is the moment to look.
	_, start, err := a.client.Bounds(a.ctx, streams.Live)
	if err != nil {
		return err
	}
	seq, err := a.appendQuiet(args[0])
	if err != nil {
		return err
	}
	return a.sendWait(args[0], seq, start)
}

var decideCmd = &command{
	name:    "decide",
	args:    "ID CALL resume|cancel",
	summary: "decide a call a session holds suspended",
	doc: `Appends a decision (on <prefix>.sess.<ID>.decide) for a call the session's last
turn left suspended (see "lash-admin sessions show ID" for the call ids): cancel it,
or resume it. --mode says how a call resumes: replay (run the call again; the
default), use-result (take --payload as the call's result; the default when
--payload is given) or pass-to-tool (run the call with --payload). A call the
session does not hold suspended is refused.`,
	min: 3, max: 3,
	flags: func(a *app, fs *flag.FlagSet) {
		keyFlag(a, fs)
		fs.StringVar(&a.payload, "payload", "", "`payload`: the call's result (use-result) or what the tool is given (pass-to-tool), passed as it is (JSON, usually)")
		fs.StringVar(&a.mode, "mode", "", "`mode`: how a resumed call goes on: replay, use-result or pass-to-tool")
	},
	check: checkDecide,
	run:   runDecide,
}

var cancelCmd = &command{
	name:    "cancel",
	args:    "ID",
	summary: "ask a session's running turn to stop",
	doc: `Appends a cancel (on <prefix>.sess.<ID>.decide): the session's running turn stops at its next safe boundary
(a checkpoint or a wait) and its calls are cancelled; with no turn running, the turn
it starts ends cancelled at once. The session must exist.`,
	min: 1, max: 1,
	flags: keyFlag,
	check: func(a *app, _ []string) error { return a.checkInput(lash.Input{Cancel: true}) },
	run:   runCancel,
}

type appendJSON struct {
	Session   string `json:"session"`
	Subject   string `json:"subject"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Key       string `json:"key"`
}

// checkInput checks an input as lash.Session.Send does and keeps it for
// appendInput.
func (a *app) checkInput(in lash.Input) error {
	if err := checkKey(a.key); err != nil {
		return a.usagef("%v", err)
	}
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if err := lash.CheckInput(data, in.Decides()); err != nil {
		return a.usagef("%v", err)
	}
	a.input = in
	return nil
}

// checkKey refuses a --key the deployment would take nothing under: a node
// consumes an input with such a key as refused, and JetStream cannot
// dedupe a signal by it.
func checkKey(key string) error {
	if key == "" {
		return nil
	}
	if err := streams.CheckID(key); err != nil {
		return fmt.Errorf("--key: %v", err)
	}
	return nil
}

// appendInput appends the checked input to the session's input subject,
// or its decision subject for decisions and cancels, and says so.
func (a *app) appendInput(id string) error {
	out, err := a.appendChecked(id)
	if err != nil {
		return err
	}
	return a.emit(out, func(w io.Writer) {
		if out.Duplicate {
			fmt.Fprintf(w, "session %s: input %d was appended before with key %s (duplicate; nothing appended)\n", id, out.Seq, out.Key)
			return
		}
		fmt.Fprintf(w, "session %s: input %d appended (key %s)\n", id, out.Seq, out.Key)
	})
}

// appendQuiet is appendInput saying nothing: the input's sequence (the
// first one's for a duplicate).
func (a *app) appendQuiet(id string) (uint64, error) {
	out, err := a.appendChecked(id)
	return out.Seq, err
}

func (a *app) appendChecked(id string) (appendJSON, error) {
	data, err := json.Marshal(a.input)
	if err != nil {
		return appendJSON{}, err
	}
	key := a.key
	if key == "" {
		key = ulid.Make().String()
	}
	subject, appendTo := a.client.Subjects().SessionInputs, sessionlog.New(a.client).AppendInput
	if strings.Contains(a.input.Agent, "@") {
		// A pin comes from operators: signed, as nodes sign notices.
		appendTo = func(ctx context.Context, session, key string, data []byte) (uint64, bool, error) {
			return sessionlog.New(a.client).AppendVouched(ctx, session, key, data, a.client.Vouch)
		}
	}
	if a.input.Decides() {
		subject, appendTo = a.client.Subjects().SessionDecisions, sessionlog.New(a.client).AppendDecision
	}
	subj, err := subject(id)
	if err != nil {
		return appendJSON{}, err
	}
	if a.input.Agent != "" {
		// A name with no agent behind it appends nothing.
		if _, err := a.agents().Resolve(a.ctx, a.input.Agent); err != nil {
			return appendJSON{}, fmt.Errorf("--agent: %w", err)
		}
	}
	seq, dup, err := appendTo(a.ctx, id, key, data)
	if err != nil {
		return appendJSON{}, err
	}
	return appendJSON{Session: id, Subject: subj, Seq: seq, Duplicate: dup, Key: key}, nil
}

func checkSend(a *app, args []string) error {
	text := args[1]
	if text == "-" {
		// The deployment's stream refuses what is over its input limit;
		// this bound only keeps a runaway pipe out of memory.
		b, err := io.ReadAll(io.LimitReader(a.stdin, 16<<20))
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		text = string(b)
	}
	return a.checkInput(lash.Input{Text: text, Agent: a.sendAgent, Labels: a.labels})
}

func checkDecide(a *app, args []string) error {
	call, action := args[1], args[2]
	d := lash.Decision{CallID: call, Action: action, Mode: a.mode, Payload: a.payload}
	switch action {
	case "resume":
		if d.Mode == "" && d.Payload != "" {
			d.Mode = "use-result"
		}
		if d.Mode == "replay" && d.Payload != "" {
			return a.usagef("--payload goes with --mode use-result or pass-to-tool, not replay")
		}
	case "cancel":
		if d.Mode != "" || d.Payload != "" {
			return a.usagef("--mode and --payload go with resume, not cancel")
		}
	default:
		return a.usagef("the decision is resume or cancel, not %q", action)
	}
	if call == "" {
		return a.usagef("the call id is empty")
	}
	// The decision's id is its idempotency key: a retry is the same
	// decision, which the turn applies once.
	if a.key == "" {
		a.key = ulid.Make().String()
	}
	d.ID = a.key
	return a.checkInput(lash.Input{Decisions: []lash.Decision{d}})
}

func runDecide(a *app, args []string) error {
	id, call := args[0], args[1]
	// A decision must name a call the session holds suspended, as its last
	// commit left it; a node would consume another as invalid input.
	p, h, err := a.head(id)
	if err != nil {
		return err
	}
	calls, err := p.Suspended(h)
	if err != nil {
		return err
	}
	var ids []string
	for _, c := range calls {
		if c.Call.ID == call {
			return a.appendInput(id)
		}
		ids = append(ids, c.Call.ID)
	}
	// A running turn (--decision-wait) may hold the call parked, committed
	// nowhere yet.
	if running, err := lash.NewInspector(a.client).Running(a.ctx, id); err != nil {
		return err
	} else if running {
		return a.appendInput(id)
	}
	if len(ids) == 0 {
		return notFound(fmt.Sprintf("session %s holds no call suspended, so none to decide (not %s)", id, call))
	}
	return notFound(fmt.Sprintf("session %s holds no suspended call %s; its suspended calls are %s", id, call, strings.Join(ids, ", ")))
}

func runCancel(a *app, args []string) error {
	id := args[0]
	known, err := a.known(id)
	if err != nil {
		return err
	}
	if !known {
		return unknownSession(id)
	}
	return a.appendInput(id)
}
