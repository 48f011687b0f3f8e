package openai

import (
	"errors"
	"net/http"

	"github.com/openai/openai-go/v3/option"

	"github.com/lash-run/lash/provider"
)

// DefaultMaxResponseBytes bounds a response body when
// Config.MaxResponseBytes is zero: 32 MiB.
const DefaultMaxResponseBytes = 32 << 20

// ErrResponseTooLarge is the cause of the terminal error Complete returns
// when a response body passes Config.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("openai: response too large")

// bodyLimit caps what one call reads of its responses (provider.BodyLimit).
type bodyLimit struct{ provider.BodyLimit }

func newBodyLimit(max int64) *bodyLimit {
	return &bodyLimit{provider.BodyLimit{Max: max, Err: ErrResponseTooLarge}}
}

// middleware wraps every response body of the call.
func (l *bodyLimit) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	l.Wrap(res)
	return res, err
}
