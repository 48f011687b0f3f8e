// Package provider holds what lash's model providers share: the classified
// error every provider returns from a model call, its conversion into the
// turn machine's CallError, and the way a tool message is shown to a model.
//
// The providers live in subpackages: provider/openai speaks the OpenAI Chat
// Completions API (OpenAI, vLLM, llama.cpp server, Ollama),
// provider/anthropic Anthropic's Messages API, and provider/scripted
// answers from a script, in process or behind the test server in testenv.
// All return *Error, so one CallError converts the failures of any; the
// transport errors, Retry-After and the response cap they share are here
// (TransportError, RetryAfter, BodyLimit):
//
//	resp, err := model.Complete(ctx, req, onDelta)
//	if err != nil {
//		return turn.LLMResult{ID: id, Err: provider.CallError(err)}
//	}
//
// # Retryable and terminal
//
// An Error is Retryable when the same request may succeed later: rate limits
// (429), request timeouts and conflicts (408, 409), server errors (5xx), a
// per-request timeout, and a broken or refused connection. Everything else is
// terminal: other 4xx statuses (400, 401, 403, 404, 422, ...), a request the
// provider cannot express, a response it cannot read, and the end of the
// caller's context. The caller's cancellation is terminal because the caller
// asked for it; its error unwraps to context.Canceled (or
// context.DeadlineExceeded for the caller's own deadline), so errors.Is works.
// lash retries retryable errors itself, through its durable Sleep, so
// providers do not retry on their own. A retryable Error may carry the
// server's Retry-After as RetryAfter; CallError copies it into the
// turn.CallError, and the turn machine sleeps at least that long before the
// retry, within its Limits.MaxBackoff.
//
// A response larger than the provider accepts is terminal, with code
// "response_too_large" (CodeTooLarge).
//
// # Secrets
//
// A model server may echo the request's credentials in an error body. A
// provider passes every error it returns through Error.Redacted with its
// own secrets (its API key), which replaces them, and any Authorization
// value or bearer token, by "[redacted]" in the code, the message and the
// text of the cause; the cause still unwraps, so errors.Is and errors.As
// work. CallError, whose result is journaled, applies Redact again without
// secrets, in case a provider forgot.
//
// # Tool messages
//
// Chat APIs accept exactly one tool message per tool call id, right after the
// assistant message that made the call. A lash conversation may answer a
// call twice: first with a pending placeholder (Message.Pending) when the
// call is suspended, later with its real result under the same CallID. A
// provider sends that later result as a user message whose text is
// LateResultText:
//
//	[late result for tool call <id> (<name>)]: <text>
//
// and the text of any tool message is ToolText: its Text, prefixed with
// "error: " when Message.Error is set.
package provider
