package gateway_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lash-run/lash/gateway"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The official OpenAI client talks to a session through Chat Completions:
// whole and streamed, a retry is one input, and errors come in its shape.
func TestChatCompletions(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{Sessions: []string{"oa-1"}})
	client := sdk.NewClient(option.WithBaseURL(r.http.URL+"/v1/"), option.WithAPIKey(tok),
		option.WithHeader(gateway.SessionHeader, "oa-1"), option.WithMaxRetries(0))
	params := sdk.ChatCompletionNewParams{Model: "lash", Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("weather?")}}
	res, err := client.Chat.Completions.New(r.ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 1 || res.Choices[0].Message.Content != "It is cold in Oslo, as usual in winter." || res.Choices[0].FinishReason != "stop" {
		t.Fatalf("completion: %+v", res)
	}
	// The same request again (a client's retry): one input, the same answer.
	again, err := client.Chat.Completions.New(r.ctx, params)
	if err != nil || again.Choices[0].Message.Content != res.Choices[0].Message.Content {
		t.Fatalf("again: %+v, %v", again, err)
	}
	if st, err := r.client.Status(r.ctx, "oa-1"); err != nil || st.Inputs != 1 {
		t.Fatalf("inputs: %+v, %v", st, err)
	}
	// The next message, streamed: the history the client keeps is not read.
	params.Messages = append(params.Messages, sdk.AssistantMessage(res.Choices[0].Message.Content), sdk.UserMessage("and say hi"))
	stream := client.Chat.Completions.NewStreaming(r.ctx, params)
	var b strings.Builder
	pieces, finish := 0, ""
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			continue
		}
		if s := ch.Choices[0].Delta.Content; s != "" {
			b.WriteString(s)
			pieces++
		}
		if ch.Choices[0].FinishReason != "" {
			finish = ch.Choices[0].FinishReason
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if b.String() != "Hello there, this answer streams in pieces." || pieces < 2 || finish != "stop" {
		t.Fatalf("streamed %q in %d pieces, finish %q", b.String(), pieces, finish)
	}
	// Refusals come as the API's errors.
	other := sdk.NewClient(option.WithBaseURL(r.http.URL+"/v1/"), option.WithAPIKey(tok),
		option.WithHeader(gateway.SessionHeader, "oa-2"), option.WithMaxRetries(0))
	_, err = other.Chat.Completions.New(r.ctx, params)
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.Message, "oa-2") {
		t.Fatalf("another session: %v", err)
	}
}
