// Package anthropic is lash's model provider for Anthropic's Messages API,
// on the official SDK (github.com/anthropics/anthropic-sdk-go/v2, ADR 0039).
// It reads no ANTHROPIC_* environment variables (everything is in Config)
// and the SDK's own retries are off: lash retries a retryable failure
// through its durable Sleep, where the attempts are journaled.
//
// # Mapping
//
// A first system message is the system prompt; a later one (a node's
// notice, such as a process's end) is a message of role system in the
// conversation, never user text. Assistant messages carry their text and
// their tool calls as tool_use blocks (arguments that are not a JSON object
// are sent as {}). Tool results are tool_result blocks, with is_error for a
// failed call, in the user turn after the tool use; the API wants turns
// that alternate, so consecutive messages of one side share a turn. A tool
// result for a call answered before (the real result after a pending
// placeholder) is user text, provider.LateResultText. Tools are custom
// tools whose input_schema is the tool's JSON schema. Sampling: max_tokens
// (Config.MaxTokens, DefaultMaxTokens 4096, when the request sets none; the
// API requires it), stop_sequences, and temperature and top_p when set.
// Empty text, which the API refuses, is sent as "(empty)".
//
// The answer's text blocks make the text, its tool_use blocks the tool
// calls; thinking blocks are not kept. Stop reasons: end_turn and
// stop_sequence are stop, tool_use tool_calls, max_tokens and a full
// context window length, refusal content_filter. Input tokens count cache
// writes and reads with the rest (usage.input_tokens +
// cache_creation_input_tokens + cache_read_input_tokens): the token budget
// counts what the model read; the cache reads and writes are kept apart
// too (turn.Usage.CacheReadTokens, CacheWriteTokens).
//
// # Streaming
//
// With an onDelta callback, Complete streams: onDelta gets each text_delta
// in order, tool inputs are put together from their input_json_delta
// pieces, and the response is the one the same request gets whole. A
// stream that ends before message_stop is a retryable stream_error.
//
// # Errors
//
// Every error is a *provider.Error, classified as provider/openai's are:
// 429, 408, 409 and 5xx (529 overloaded included) are retryable, with the
// server's Retry-After (or retry-after-ms) as RetryAfter; other 4xx are
// terminal; the code is the error body's type (rate_limit_error,
// overloaded_error, authentication_error, ...). An error event in the
// middle of a stream is retryable unless its type says the request is
// wrong. Config.Timeout expiring is a retryable timeout; a response over
// Config.MaxResponseBytes (32 MiB) a terminal response_too_large; the
// caller's context ending a terminal canceled or deadline_exceeded.
// Errors carry neither Config.APIKey nor any Authorization value or bearer
// token: servers echo them in error bodies.
package anthropic
