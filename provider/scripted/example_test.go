package scripted_test

import (
	"context"
	"fmt"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/turn"
)

func Example() {
	script, err := scripted.Parse(`
rule lookup
  when user contains weather
  when tools = 0
  fail 503 first 1 overloaded
  say Let me check.
  call get_weather {"city": "Oslo"}

rule answer
  when tool contains °C
  say It is -3°C in Oslo.

default
  say Ask me about the weather.
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	model := scripted.NewModel(script)
	ctx := context.Background()
	req := turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: "weather in Oslo?"}}}

	// The first request fails, retryably; the retry answers.
	_, err = model.Complete(ctx, req, nil)
	ce := provider.CallError(err)
	fmt.Printf("attempt 1: retryable=%v code=%s\n", ce.Retryable, ce.Code)
	resp, _ := model.Complete(ctx, req, nil)
	call := resp.ToolCalls[0]
	fmt.Printf("attempt 2: %q, calls %s %s %s, finish %s\n", resp.Text, call.ID, call.Name, call.Arguments, resp.Finish)

	req.Messages = append(req.Messages,
		turn.Message{Role: turn.RoleAssistant, Text: resp.Text, ToolCalls: resp.ToolCalls},
		turn.Message{Role: turn.RoleTool, CallID: call.ID, Name: call.Name, Text: "-3°C"})
	resp, _ = model.Complete(ctx, req, func(delta string) { fmt.Printf("delta %q\n", delta) })
	fmt.Printf("answer: %q, usage %d/%d\n", resp.Text, resp.Usage.InputTokens, resp.Usage.OutputTokens)

	// Output:
	// attempt 1: retryable=true code=http_503
	// attempt 2: "Let me check.", calls call_1 get_weather {"city": "Oslo"}, finish tool_calls
	// delta "It "
	// delta "is "
	// delta "-3°C "
	// delta "in "
	// delta "Oslo."
	// answer: "It is -3°C in Oslo.", usage 13/5
}
