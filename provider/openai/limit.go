package openai

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/openai/openai-go/v3/option"
)

// DefaultMaxResponseBytes bounds a response body when
// Config.MaxResponseBytes is zero: 32 MiB.
const DefaultMaxResponseBytes = 32 << 20

// ErrResponseTooLarge is the cause of the terminal error Complete returns
// when a response body passes Config.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("openai: response too large")

// bodyLimit caps what one call reads of its responses. It remembers that
// the cap was hit, so the call is classified by that and not by however
// the SDK wraps the read error (a JSON, status or stream error).
type bodyLimit struct {
	max  int64 // of the answer, Config.MaxResponseBytes
	body int64 // of the body when not max: a stream's framing
	hit  atomic.Bool
}

// streamFraming is how much a stream may carry around its answer.
const streamFraming = 64

// middleware wraps every response body of the call in a limitedBody.
func (l *bodyLimit) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if res != nil && res.Body != nil {
		left := l.max
		if l.body > 0 {
			left = l.body
		}
		res.Body = &limitedBody{rc: res.Body, left: left, limit: l}
	}
	return res, err
}

// answer counts n more bytes of a streamed answer against the limit.
func (l *bodyLimit) answer(total int64) error {
	if total > l.max {
		l.hit.Store(true)
		return ErrResponseTooLarge
	}
	return nil
}

// limitedBody reads at most left more bytes; one byte beyond fails the read
// with ErrResponseTooLarge instead of buffering the rest.
type limitedBody struct {
	rc    io.ReadCloser
	left  int64
	over  bool
	limit *bodyLimit
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, ErrResponseTooLarge
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Ask for one byte more than allowed: getting it proves the body is
	// too large without reading further.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n = int(b.left)
		b.left, b.over = 0, true
		b.limit.hit.Store(true)
		return n, ErrResponseTooLarge
	}
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
