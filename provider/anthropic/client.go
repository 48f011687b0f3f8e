package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// DefaultBaseURL is Anthropic's API, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is the max_tokens of a request whose sampling sets
// none: the Messages API requires one.
const DefaultMaxTokens = 4096

// DefaultMaxResponseBytes bounds a response body when
// Config.MaxResponseBytes is zero: 32 MiB.
const DefaultMaxResponseBytes = 32 << 20

var (
	// ErrInvalidConfig is wrapped by the errors of Config.Validate.
	ErrInvalidConfig = errors.New("anthropic: invalid config")
	// ErrTimeout is the cause of the retryable error Complete returns when
	// Config.Timeout expires.
	ErrTimeout = errors.New("anthropic: request timed out")
	// ErrResponseTooLarge is the cause of the terminal error Complete
	// returns when a response passes Config.MaxResponseBytes.
	ErrResponseTooLarge = errors.New("anthropic: response too large")
)

// Error is the classified error Complete returns (provider.Error).
type Error = provider.Error

// Config configures a Client.
type Config struct {
	// BaseURL is the API's base URL, without /v1. Empty means
	// DefaultBaseURL.
	BaseURL string
	// APIKey authenticates the requests.
	APIKey string
	// Model is used for requests that name none.
	Model string
	// MaxTokens is max_tokens for requests whose sampling sets none.
	// Zero means DefaultMaxTokens.
	MaxTokens int64
	// Timeout bounds each call, from the request to the end of the
	// response; it expiring is retryable. Zero: only the caller's context.
	Timeout time.Duration
	// MaxRetries is how often the SDK itself retries. Leave it at 0: lash
	// retries through its durable Sleep, where attempts are journaled.
	MaxRetries int
	// HTTPClient, if not nil, sends the requests.
	HTTPClient *http.Client
	// MaxResponseBytes bounds a response body; when streaming, the answer,
	// and the stream at 64 times it. Zero means DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Validate checks the config; its errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	if err := provider.CheckLimits(c.Timeout, c.MaxRetries, c.MaxResponseBytes); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("%w: negative MaxTokens %d", ErrInvalidConfig, c.MaxTokens)
	}
	return nil
}

// Client calls the Anthropic Messages API. It is safe for concurrent use.
type Client struct {
	cfg      Config
	messages sdk.MessageService
}

// New returns a client for cfg. It reads no environment variables.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	svc := sdk.NewMessageService(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(cfg.MaxRetries),
	)
	return &Client{cfg: cfg, messages: svc}, nil
}

// Complete sends req and returns the model's response. With onDelta the
// answer is streamed: onDelta gets each piece of text in order, and the
// response is the one the same request gets without streaming. Errors are
// *Error, classified as the package documentation says, and carry no
// secret.
func (c *Client) Complete(ctx context.Context, req turn.ModelRequest, onDelta func(text string)) (turn.ModelResponse, error) {
	resp, err := c.complete(ctx, req, onDelta)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: provider.CodeInternal, Message: err.Error(), Err: err}
		}
		return turn.ModelResponse{}, e.Redacted(c.cfg.APIKey)
	}
	return resp, nil
}

func (c *Client) complete(ctx context.Context, req turn.ModelRequest, onDelta func(text string)) (turn.ModelResponse, error) {
	params, extra, err := c.params(req)
	if err != nil {
		return turn.ModelResponse{}, err
	}
	callCtx := ctx
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrTimeout)
		defer cancel()
	}
	var raw *http.Response
	limit := &provider.BodyLimit{Max: c.cfg.MaxResponseBytes, Err: ErrResponseTooLarge}
	opts := append(extra, option.WithResponseInto(&raw), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		limit.Wrap(res)
		return res, err
	}))
	var resp turn.ModelResponse
	if onDelta == nil {
		var m *sdk.Message
		if m, err = c.messages.New(callCtx, params, opts...); err == nil {
			resp, err = fromMessage(m)
		}
	} else {
		limit.Body = limit.Max * provider.StreamFraming
		resp, err = readStream(c.messages.NewStreaming(callCtx, params, opts...), onDelta, limit)
	}
	if err != nil {
		return turn.ModelResponse{}, c.classify(ctx, callCtx, err, raw, limit)
	}
	return resp, nil
}
