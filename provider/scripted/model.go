package scripted

import (
	"context"
	"sync"
	"time"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// Model answers model calls from a Script, in process. It counts the
// failures of "fail ... first K" rules, once per rule; everything else is
// the script's pure reply. It is safe for concurrent use.
type Model struct {
	script *Script

	mu    sync.Mutex
	fails map[string]int // rule name -> failures delivered
}

// NewModel returns a Model answering from script.
func NewModel(script *Script) *Model {
	return &Model{script: script, fails: map[string]int{}}
}

// Script returns the script the model answers from.
func (m *Model) Script() *Script { return m.script }

// Reply is Script.Respond with the failure counting applied: a "fail ...
// first K" failure is kept in the reply for the first K requests its rule
// matches and dropped (Fail is nil) after that. Each call counts; callers
// that deliver replies themselves, like the test server, use it.
func (m *Model) Reply(req turn.ModelRequest) (Reply, error) {
	rep, err := m.script.Respond(req)
	if err != nil || rep.Fail == nil || rep.Fail.First == 0 {
		return rep, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fails[rep.Rule] >= rep.Fail.First {
		rep.Fail = nil
		return rep, nil
	}
	m.fails[rep.Rule]++
	return rep, nil
}

// Reset forgets the failures counted so far.
func (m *Model) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.fails)
}

// Complete answers req as a model provider would. It waits out the reply's
// delay, hangs until ctx ends for a hanging rule, and fails with a
// *provider.Error carrying the scripted status for a failing one. A request
// no rule matches fails with a terminal *provider.Error (code
// "invalid_request") wrapping ErrNoMatch. The end of ctx fails with
// provider.ContextError. If onDelta is not nil, it is called with each of
// Chunks(text) before Complete returns.
func (m *Model) Complete(ctx context.Context, req turn.ModelRequest, onDelta func(text string)) (turn.ModelResponse, error) {
	if err := ctx.Err(); err != nil {
		return turn.ModelResponse{}, provider.ContextError(err)
	}
	rep, err := m.Reply(req)
	if err != nil {
		return turn.ModelResponse{}, &provider.Error{Code: provider.CodeInvalidRequest, Message: err.Error(), Err: err}
	}
	if rep.Hang {
		<-ctx.Done()
		return turn.ModelResponse{}, provider.ContextError(ctx.Err())
	}
	if rep.Delay > 0 {
		t := time.NewTimer(rep.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return turn.ModelResponse{}, provider.ContextError(ctx.Err())
		case <-t.C:
		}
	}
	if f := rep.Fail; f != nil {
		return turn.ModelResponse{}, provider.StatusError(f.Status, "", f.Message)
	}
	if onDelta != nil {
		for i, c := range Chunks(rep.Response.Text) {
			if i > 0 && rep.Pace > 0 {
				if err := sleep(ctx, rep.Pace); err != nil {
					return turn.ModelResponse{}, err
				}
			}
			onDelta(c)
		}
	}
	return rep.Response, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return provider.ContextError(ctx.Err())
	case <-t.C:
		return nil
	}
}
