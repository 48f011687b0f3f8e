package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// DefaultBaseURL is OpenAI's API, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// ErrInvalidConfig is wrapped by the errors of Config.Validate.
var ErrInvalidConfig = errors.New("openai: invalid config")

// Error is the classified error Complete returns. It is provider.Error, so
// that every provider's failures convert alike; see CallError.
type Error = provider.Error

// CallError converts an error returned by Complete into the turn machine's
// CallError; it is provider.CallError.
func CallError(err error) *turn.CallError { return provider.CallError(err) }

// Config configures a Client. Only the base URL differs between OpenAI,
// vLLM (http://host:8000/v1), llama.cpp's server (http://host:8080/v1) and
// Ollama (http://host:11434/v1).
type Config struct {
	// BaseURL is the API's base URL, including the /v1 path. Empty means
	// DefaultBaseURL.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none, which local
	// servers accept.
	APIKey string
	// Model is used for requests that name none.
	Model string
	// Timeout bounds each call, from sending the request to the end of the
	// response (the last event of a stream). It expiring is a retryable
	// error; zero means no timeout but the caller's context.
	Timeout time.Duration
	// MaxRetries is how often the SDK itself retries a retryable failure.
	// Leave it at 0: lash retries through its durable Sleep, and retries
	// inside a call would hide the attempts from the journal.
	MaxRetries int
	// MaxCompletionTokens sends Sampling.MaxTokens as max_completion_tokens,
	// which OpenAI's reasoning models require, instead of max_tokens, which
	// every OpenAI-compatible server understands.
	MaxCompletionTokens bool
	// HTTPClient, if not nil, sends the requests; by default a client on
	// http.DefaultTransport does.
	HTTPClient *http.Client
	// MaxResponseBytes bounds the body of a response; when streaming, the
	// answer (text and tool call arguments) and the stream at 64 times it, as decoded by the transport. A longer one fails the
	// call, terminal, with code provider.CodeTooLarge; the rest is not
	// read. Zero means DefaultMaxResponseBytes (32 MiB).
	MaxResponseBytes int64
}

// Validate checks the config; its errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	if err := provider.CheckLimits(c.Timeout, c.MaxRetries, c.MaxResponseBytes); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return nil
}

// Client calls an OpenAI-compatible Chat Completions API. It is safe for
// concurrent use.
type Client struct {
	cfg  Config
	chat sdk.ChatCompletionService
}

// New returns a client for cfg. It reads no environment variables: all it
// uses is in cfg.
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
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	// NewChatCompletionService, unlike sdk.NewClient, does not read
	// OPENAI_* variables from the environment.
	chat := sdk.NewChatCompletionService(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(cfg.MaxRetries),
	)
	return &Client{cfg: cfg, chat: chat}, nil
}

// Complete sends req and returns the model's response. If onDelta is not
// nil, the response is streamed: onDelta is called with each piece of text
// as it arrives, in order, and the returned response is the same as without
// streaming (text, tool calls, finish reason and usage, which is asked for
// with stream_options.include_usage).
//
// Errors are *Error, classified retryable or terminal (see the package
// documentation); the end of ctx gives a terminal error that unwraps to
// ctx.Err(). No error carries Config.APIKey or an Authorization value in
// its text: a server may echo them back.
func (c *Client) Complete(ctx context.Context, req turn.ModelRequest, onDelta func(text string)) (turn.ModelResponse, error) {
	resp, err := c.complete(ctx, req, onDelta)
	if err != nil {
		// One exit for every failure, so none skips the redaction.
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: provider.CodeInternal, Message: err.Error(), Err: err}
		}
		return turn.ModelResponse{}, e.Redacted(c.cfg.APIKey)
	}
	return resp, nil
}

func (c *Client) complete(ctx context.Context, req turn.ModelRequest, onDelta func(text string)) (turn.ModelResponse, error) {
	params, err := c.params(req)
	if err != nil {
		return turn.ModelResponse{}, err
	}
	callCtx := ctx
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrTimeout)
		defer cancel()
	}
	var (
		resp  turn.ModelResponse
		raw   *http.Response
		limit = newBodyLimit(c.cfg.MaxResponseBytes)
		opts  = []option.RequestOption{option.WithResponseInto(&raw), option.WithMiddleware(limit.middleware)}
	)
	if onDelta == nil {
		var cc *sdk.ChatCompletion
		cc, err = c.chat.New(callCtx, params, opts...)
		if err == nil {
			resp, err = fromCompletion(cc, req)
		}
	} else {
		params.StreamOptions.IncludeUsage = sdk.Bool(true)
		// A stream frames each piece of text in a JSON chunk, tens of
		// bytes around a word: the answer is what the limit bounds, and
		// the body only as far as its framing needs.
		limit.Body = limit.Max * provider.StreamFraming
		stream := c.chat.NewStreaming(callCtx, params, opts...)
		resp, err = readStream(stream, req, onDelta, limit)
	}
	if err != nil {
		return turn.ModelResponse{}, c.classify(ctx, callCtx, err, raw, limit)
	}
	return resp, nil
}
