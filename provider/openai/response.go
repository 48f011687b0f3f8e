package openai

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// fromCompletion maps a non-streamed answer. Only the first choice counts:
// lash never asks for more than one.
func fromCompletion(cc *sdk.ChatCompletion, req turn.ModelRequest) (turn.ModelResponse, error) {
	if cc == nil || len(cc.Choices) == 0 {
		return turn.ModelResponse{}, badResponse("the response has no choices")
	}
	ch := cc.Choices[0]
	calls := make([]turn.ToolCall, 0, len(ch.Message.ToolCalls))
	for _, tc := range ch.Message.ToolCalls {
		calls = append(calls, turn.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return response(ch.Message.Content, ch.Message.Refusal, calls, ch.FinishReason, cc.Usage, req), nil
}

// response builds the lash response the same way for both paths. The text
// is the content, or the refusal when there is no content. Tool calls
// without an id (some local servers omit them) get "call_<n>", numbered on
// from the calls in the request, as the scripted model does. An empty finish
// reason becomes tool_calls or stop.
func response(content, refusal string, calls []turn.ToolCall, finish string, u sdk.CompletionUsage, req turn.ModelRequest) turn.ModelResponse {
	r := turn.ModelResponse{
		Text:   content,
		Finish: turn.FinishReason(finish),
		Usage: turn.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
			CacheReadTokens: u.PromptTokensDetails.CachedTokens, CacheWriteTokens: u.PromptTokensDetails.CacheWriteTokens,
			ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens},
	}
	if r.Text == "" {
		r.Text = refusal
	}
	if len(calls) > 0 {
		next := 1
		for _, m := range req.Messages {
			next += len(m.ToolCalls)
		}
		for i := range calls {
			if calls[i].ID == "" {
				calls[i].ID = fmt.Sprintf("call_%d", next+i)
			}
		}
		r.ToolCalls = calls
	}
	if r.Finish == "" || r.Finish == "function_call" {
		r.Finish = turn.FinishStop
		if len(r.ToolCalls) > 0 {
			r.Finish = turn.FinishToolCalls
		}
	}
	return r
}

// readStream reads a streamed answer to its end, calling onDelta for each
// piece of content, and accumulates the same response fromCompletion would
// build.
func readStream(stream *ssestream.Stream[sdk.ChatCompletionChunk], req turn.ModelRequest, onDelta func(string), limit *bodyLimit) (turn.ModelResponse, error) {
	defer stream.Close()
	var (
		acc     streamAcc
		content strings.Builder
		refusal strings.Builder
		finish  string
		usage   sdk.CompletionUsage
		chunks  int
		size    int64 // of the answer so far
	)
	for stream.Next() {
		chunks++
		ch := stream.Current()
		for _, choice := range ch.Choices {
			if choice.Index == 0 {
				size += int64(len(choice.Delta.Content) + len(choice.Delta.Refusal))
				for _, tc := range choice.Delta.ToolCalls {
					size += int64(len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments))
				}
			}
		}
		if err := limit.Answer(size); err != nil {
			return turn.ModelResponse{}, err
		}
		if ch.Usage.PromptTokens != 0 || ch.Usage.CompletionTokens != 0 {
			usage = ch.Usage
		}
		for _, choice := range ch.Choices {
			if choice.Index != 0 {
				continue
			}
			d := choice.Delta
			if d.Content != "" {
				content.WriteString(d.Content)
				onDelta(d.Content)
			}
			refusal.WriteString(d.Refusal)
			for _, tc := range d.ToolCalls {
				acc.add(tc)
			}
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return turn.ModelResponse{}, err
	}
	if chunks == 0 {
		return turn.ModelResponse{}, badResponse("the stream ended without a chunk")
	}
	if finish == "" {
		// The body ended cleanly but the answer did not (a server that
		// stopped, a close-delimited body cut): what came is not the
		// model's answer, and another attempt may get it whole.
		return turn.ModelResponse{}, &Error{Code: provider.CodeStream, Message: "the stream ended before the answer did: no finish reason", Retryable: true}
	}
	return response(content.String(), refusal.String(), acc.calls(), finish, usage, req), nil
}

// streamAcc puts tool calls together from their deltas. A call is keyed by
// its index; a delta for a known index but with another id starts a new
// call, for servers that send every call whole at index 0.
type streamAcc struct {
	parts []*callPart
}

type callPart struct {
	index int64
	id    string
	name  string
	args  strings.Builder
}

func (a *streamAcc) add(d sdk.ChatCompletionChunkChoiceDeltaToolCall) {
	var p *callPart
	for _, q := range slices.Backward(a.parts) {
		if q.index == d.Index {
			p = q
			break
		}
	}
	if p == nil || (d.ID != "" && p.id != "" && d.ID != p.id) {
		p = &callPart{index: d.Index}
		a.parts = append(a.parts, p)
	}
	if p.id == "" {
		p.id = d.ID
	}
	if p.name == "" {
		p.name = d.Function.Name
	}
	p.args.WriteString(d.Function.Arguments)
}

func (a *streamAcc) calls() []turn.ToolCall {
	if len(a.parts) == 0 {
		return nil
	}
	parts := slices.Clone(a.parts)
	slices.SortStableFunc(parts, func(x, y *callPart) int { return cmp.Compare(x.index, y.index) })
	out := make([]turn.ToolCall, len(parts))
	for i, p := range parts {
		out[i] = turn.ToolCall{ID: p.id, Name: p.name, Arguments: p.args.String()}
	}
	return out
}

func badResponse(msg string) *Error {
	return &Error{Code: provider.CodeBadResponse, Message: msg}
}
