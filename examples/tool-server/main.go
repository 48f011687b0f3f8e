// Command tool-server serves lash tools over NATS. ledger_append appends an
// entry to a ledger file at most once per idempotency key: a retried call,
// in doubt after a worker died, finds its key in the file and does not
// append again. ledger_propose does durable work through the node API, as
// a tool in any language can: it reserves the entry in a step (recorded
// once, whatever runs again), mints an event key for a human's approval,
// parks the call on it, and appends once the key's value comes.
//
// It prints one line per invocation on stdout. The first SIGINT or SIGTERM
// drains the connection (a running call finishes and is answered); a second
// one ends the process at once.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lash-run/lash/internal/ledger"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, stop, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tool-server:", err)
		os.Exit(1)
	}
}

const schema = `{"type":"object","properties":{"entry":{"type":"string","description":"the line to append"}},"required":["entry"],"additionalProperties":false}`

// run serves until ctx ends, then drains. unhook restores the default
// signal handling, so that a second signal kills the process mid-drain.
func run(ctx context.Context, unhook func(), args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tool-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats", envOr("NATS_URL", nats.DefaultURL), "NATS server `URL` (default from $NATS_URL)")
	prefix := fs.String("prefix", natstool.DefaultPrefix, "subject prefix: the tool is served on <prefix>.tool.ledger_append")
	delay := fs.Duration("delay", 0, "wait this long in each call before doing the work")
	path := fs.String("journal", "ledger.jsonl", "the ledger `FILE`, one JSON line per appended entry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	closed := make(chan struct{})
	// The closed handler goes in before micro adds its own hook on top.
	nc, err := nats.Connect(*url, nats.Name("lash tool-server"),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return err
	}
	l := ledger.New(*path)
	_, err = natstool.Serve(nc, *prefix, micro.Config{
		Name:        "lash-ledger",
		Version:     "1.0.0",
		Description: "An example lash tool: an append-only ledger, idempotent per call.",
	}, natstool.Served{
		Name:        "ledger_append",
		Description: "Append an entry to the ledger. Each call appends at most once, even when retried.",
		Schema:      json.RawMessage(schema),
		Handle: func(ctx context.Context, req natstool.Request) (string, error) {
			return appendEntry(ctx, l, *delay, req, stdout)
		},
	}, natstool.Served{
		Name:        "ledger_propose",
		Description: "Propose an entry: it is appended once a person approves it.",
		Schema:      json.RawMessage(schema),
		Handle: func(ctx context.Context, req natstool.Request) (string, error) {
			return propose(ctx, nodeapi.NewClient(nc, *prefix), l, req, stdout)
		},
	})
	if err != nil {
		nc.Close()
		return err
	}
	fmt.Fprintf(stderr, "tool-server: serving ledger_append on %s, ledger %s\n",
		natstool.Subject(*prefix, "ledger_append"), *path)

	select {
	case <-ctx.Done():
	case <-closed:
		return errors.New("connection closed")
	}
	unhook()
	fmt.Fprintln(stderr, "tool-server: draining")
	if err := nc.Drain(); err != nil {
		return err
	}
	<-closed
	return nil
}

func appendEntry(ctx context.Context, l *ledger.Ledger, delay time.Duration, req natstool.Request, stdout io.Writer) (string, error) {
	var a struct {
		Entry string `json:"entry"`
	}
	if err := json.Unmarshal(req.Args, &a); err != nil {
		return "", err // Serve checked the schema: not expected
	}
	if req.IdempotencyKey == "" {
		return "", fmt.Errorf("no %s header: refusing an append that could not be deduplicated", natstool.HeaderIdempotencyKey)
	}
	// A line as the call begins shows a caller that dies mid-call.
	fmt.Fprintf(stdout, "begin key=%s attempt=%d in_doubt=%t\n", value(req.IdempotencyKey), req.Attempt, req.InDoubt)
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	applied, err := l.Append(req.IdempotencyKey, a.Entry)
	line := fmt.Sprintf("invoke key=%s attempt=%d in_doubt=%t entry=%s applied=%t",
		value(req.IdempotencyKey), req.Attempt, req.InDoubt, value(a.Entry), applied)
	if err != nil {
		line += " err=" + value(err.Error())
	}
	fmt.Fprintln(stdout, line)
	switch {
	case err != nil:
		return "", err
	case applied:
		return "appended " + strconv.Quote(a.Entry), nil
	default:
		return "already appended " + strconv.Quote(a.Entry) + " for this call; not appended again", nil
	}
}

// propose is durable work done through the node API with the call's
// ticket: a step, an event key, a wait. Each request is plain NATS
// request-reply with JSON, so any language's client does the same.
func propose(ctx context.Context, api *nodeapi.Client, l *ledger.Ledger, req natstool.Request, stdout io.Writer) (string, error) {
	var a struct {
		Entry string `json:"entry"`
	}
	if err := json.Unmarshal(req.Args, &a); err != nil {
		return "", err
	}
	if req.Ticket == "" {
		return "", fmt.Errorf("no %s header: this tool needs a deployment with a secret", natstool.HeaderCallTicket)
	}
	// The reservation happens once per call: a run that finds the step
	// recorded skips it.
	got, err := api.Step(ctx, req.Ticket, "reserve", nil)
	if err != nil {
		return "", err
	}
	if !got.Recorded {
		fmt.Fprintf(stdout, "reserve key=%s entry=%s\n", value(req.IdempotencyKey), value(a.Entry))
		if _, err := api.Step(ctx, req.Ticket, "reserve", json.RawMessage(strconv.Quote(a.Entry))); err != nil {
			return "", err
		}
	}
	key, err := api.EventKey(ctx, req.Ticket, "approval")
	if err != nil {
		return "", err
	}
	ev, err := api.AwaitEvent(ctx, req.Ticket, "approval", 0)
	if err != nil {
		return "", err
	}
	switch ev.Status {
	case "pending":
		// Whoever approves publishes {"key": KEY, "value": ...} on
		// <prefix>.signal.event.<id>; the call runs again then.
		fmt.Fprintf(stdout, "approval key=%s\n", key)
		return "", natstool.Pending(ev.Pending)
	case "resolved":
		if _, err := l.Append(req.IdempotencyKey, a.Entry); err != nil {
			return "", err
		}
		fmt.Fprintf(stdout, "approved key=%s value=%s\n", value(req.IdempotencyKey), value(string(ev.Value)))
		return "approved " + string(ev.Value) + "; appended " + strconv.Quote(a.Entry), nil
	}
	return "not approved: " + ev.Status, nil
}

// value quotes a logfmt value only when it needs it.
func value(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\r\n\"=") || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
