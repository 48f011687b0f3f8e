package natstool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/propagation"
)

// DefaultCallTimeout bounds a call whose context has no deadline. Under a
// tools.Runner every call has one.
const DefaultCallTimeout = time.Minute

// remote is a tool served over NATS.
type remote struct {
	nc      *nats.Conn
	spec    turn.ToolSpec
	subject string
}

func (t *remote) Spec() turn.ToolSpec { return t.spec }

// Call sends the call to whichever instance of the tool's services answers
// first (micro's queue group) and maps the answer as the package doc says.
func (t *remote) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCallTimeout)
		defer cancel()
	}
	msg := nats.NewMsg(t.subject)
	msg.Data = args
	// The caller's trace goes along (W3C traceparent), so the tool's
	// spans join it.
	traceContext.Inject(ctx, propagation.HeaderCarrier(msg.Header))
	if info, ok := tools.Info(ctx); ok {
		msg.Header.Set(HeaderIdempotencyKey, info.IdempotencyKey())
		msg.Header.Set(HeaderAttempt, strconv.Itoa(info.Attempt))
		if info.InDoubt {
			msg.Header.Set(HeaderInDoubt, "true")
		}
		if info.Key.Call != "" {
			msg.Header.Set(HeaderCallID, info.Key.Call)
		}
		if ticket, err := tools.CallTicket(ctx); err == nil {
			msg.Header.Set(HeaderCallTicket, ticket)
		}
		if info.Decision != nil {
			v, b64 := encodeDecision(info.Decision.Payload)
			msg.Header.Set(HeaderDecision, v)
			if b64 {
				msg.Header.Set(HeaderDecisionEncoding, "base64")
			}
		}
	}
	resp, err := t.request(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// The Runner would record an error as this same failure; a result
		// says so without pretending to be something the driver could skip.
		return tools.Result{Status: turn.ToolError, Output: fmt.Sprintf("no server for tool %q", t.spec.Name)}, nil
	case err != nil:
		// The Runner tells its deadline and its cancellation from other
		// failures by its context, not by this error.
		return tools.Result{}, fmt.Errorf("natstool: tool %q: %w", t.spec.Name, err)
	}
	code := resp.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		return tools.Result{Status: turn.ToolOK, Output: string(resp.Data)}, nil
	}
	text := string(resp.Data)
	if text == "" {
		text = resp.Header.Get(micro.ErrorHeader)
	}
	if code == CodePending {
		return tools.Result{}, tools.Pending(text)
	}
	if text == "" {
		text = fmt.Sprintf("tool %q failed with code %s", t.spec.Name, code)
	}
	return tools.Result{Status: turn.ToolError, Output: text}, nil
}

// NoServerWait is how long a call waits for a server of its tool to come
// back (a restart, a deploy) before it fails as "no server".
var NoServerWait = 15 * time.Second

// request sends msg, waiting up to NoServerWait, within ctx's deadline, for
// a server while none answers. It returns nats.ErrNoResponders once that
// wait is over, and ctx's error only when ctx was cancelled.
func (t *remote) request(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	giveUp := time.Now().Add(NoServerWait)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		resp, err := t.nc.RequestMsgWithContext(ctx, msg)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().Add(wait).After(giveUp) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, err
			}
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// traceContext carries OpenTelemetry trace context in request headers.
var traceContext = propagation.TraceContext{}
