// Package openai is lash's model provider for the OpenAI Chat Completions
// API and the servers that speak it: OpenAI itself, vLLM, llama.cpp's
// server and Ollama. Only Config.BaseURL differs between them.
//
//	c, err := openai.New(openai.Config{
//		BaseURL: "http://localhost:11434/v1",
//		Model:   "qwen3:8b",
//		Timeout: 2 * time.Minute,
//	})
//	...
//	resp, err := c.Complete(ctx, req, nil) // or with an onDelta to stream
//	if err != nil {
//		return turn.LLMResult{ID: id, Err: openai.CallError(err)}
//	}
//
// It is built on the official SDK, github.com/openai/openai-go/v3, and uses
// only its chat completion service: the client reads no OPENAI_*
// environment variables, and the SDK's own retries are off (Config
// MaxRetries is 0 unless set), because lash retries a retryable failure
// through its durable Sleep, where the attempts are journaled.
//
// # Mapping
//
// A turn.ModelRequest becomes a chat completion request: system, user and
// assistant messages (with their tool calls as function calls), tool
// messages answering a call by id, the tools as function tools whose
// parameters are the tool's JSON schema, and the sampling parameters
// (temperature, top_p, max_tokens or, with Config.MaxCompletionTokens,
// max_completion_tokens, and stop). A failed tool call's text is sent as
// "error: <text>".
//
// The API accepts one tool message per tool_call_id. When a call was first
// answered by a pending placeholder (Message.Pending) and its real result
// follows later under the same CallID, that later result is sent as a user
// message reading
//
//	[late result for tool call <id> (<name>)]: <text>
//
// (provider.LateResultText). The answer's text, tool calls (id, name,
// arguments), finish reason and token usage (with the cached prompt tokens,
// cache writes and reasoning tokens when the server reports them) make the
// turn.ModelResponse.
// Tool calls without an id, which some local servers send, get
// "call_<n>", numbered on from the calls in the conversation.
//
// # Streaming
//
// With an onDelta callback, Complete streams (server-sent events), calls
// onDelta with each piece of text in order, puts tool calls together from
// their deltas, and asks for usage with stream_options.include_usage. The
// response it returns is the one the same request gets without streaming.
//
// # Errors
//
// Every error from Complete is an *Error (provider.Error), classified:
//
//	status or failure                          retryable  code
//	429, 408, 409, 5xx                         yes        server's, or http_<status>
//	other 4xx (400, 401, 403, 404, 422, ...)   no         server's, or http_<status>
//	an x-should-retry header                   as it says
//	Config.Timeout expired                     yes        timeout (unwraps to ErrTimeout)
//	connection refused, reset, closed early    yes        connection
//	network timeout                            yes        timeout
//	error event in the middle of a stream      yes        server's, or stream_error
//	a stream that ends with no finish reason   yes        stream_error
//	untrusted certificate, unknown host        no         connection
//	response over Config.MaxResponseBytes      no         response_too_large
//	response not readable as an answer         no         bad_response
//	request not expressible (no model, ...)    no         invalid_request
//	the caller's context ended                 no         canceled or deadline_exceeded
//
// The caller's cancellation unwraps to ctx.Err(), so
// errors.Is(err, context.Canceled) holds. CallError converts any error from
// Complete into the turn machine's *turn.CallError.
//
// A retryable error's RetryAfter is the server's wait: retry-after-ms when
// present (OpenAI sends it), otherwise Retry-After in seconds or as an HTTP
// date, at most a day; a date already past is no wait. The turn machine
// sleeps at least that long before retrying, within its MaxBackoff.
//
// A response body longer than Config.MaxResponseBytes (default 32 MiB), or
// a streamed answer (its text, refusal and tool call arguments) longer than
// it, or a stream longer than 64 times it (its framing: a JSON chunk of
// tens of bytes around each token), ends the call with response_too_large,
// which unwraps to ErrResponseTooLarge; the rest of the body is not read.
//
// No error carries Config.APIKey: Complete replaces it, any Authorization
// value and any bearer token by "[redacted]" in the error's code, message
// and cause's text (provider.Error.Redacted), because servers echo them in
// error bodies. The cause still unwraps, to the SDK's own *Error for
// instance, whose fields hold the raw request and response: inspect them,
// do not log them.
package openai
