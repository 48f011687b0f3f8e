package provider

import (
	"io"
	"net/http"
	"sync/atomic"
)

// StreamFraming is how much a stream may carry around its answer: a JSON
// event of tens of bytes around each piece of text.
const StreamFraming = 64

// BodyLimit caps what one call reads of its responses: Max bytes of the
// answer, and of a body (Body, when set, for a stream's framing). It
// remembers that the cap was hit, so the call is classified by that and
// not by however an SDK wraps the read error (a JSON, status or stream
// error). Err is what a read past the cap fails with.
type BodyLimit struct {
	Max, Body int64
	Err       error
	hit       atomic.Bool
}

// Wrap makes res's body fail with Err one byte past the cap.
func (l *BodyLimit) Wrap(res *http.Response) {
	if res == nil || res.Body == nil {
		return
	}
	left := l.Max
	if l.Body > 0 {
		left = l.Body
	}
	res.Body = &limitedBody{rc: res.Body, left: left, limit: l}
}

// Answer checks a streamed answer of total bytes against Max.
func (l *BodyLimit) Answer(total int64) error {
	if total > l.Max {
		l.hit.Store(true)
		return l.Err
	}
	return nil
}

// Hit reports whether the call met the cap.
func (l *BodyLimit) Hit() bool { return l.hit.Load() }

// limitedBody reads at most left more bytes; one byte beyond fails the read
// with the limit's Err instead of buffering the rest.
type limitedBody struct {
	rc    io.ReadCloser
	left  int64
	over  bool
	limit *BodyLimit
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, b.limit.Err
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
		return n, b.limit.Err
	}
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
