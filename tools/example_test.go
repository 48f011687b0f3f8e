package tools_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

type WeatherArgs struct {
	City  string `json:"city" jsonschema:"the city to look up"`
	Units string `json:"units,omitempty" jsonschema:"celsius or fahrenheit"`
}

type TransferArgs struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

func Example() {
	weather, err := tools.Func("weather", "Current weather in a city.",
		func(ctx context.Context, a WeatherArgs) (string, error) {
			return "sunny in " + a.City, nil
		})
	if err != nil {
		panic(err)
	}
	transfer, err := tools.Func("transfer", "Send money; needs approval.",
		func(ctx context.Context, a TransferArgs) (string, error) {
			info, _ := tools.Info(ctx)
			if info.Decision == nil {
				return "", tools.Pending(fmt.Sprintf("approve sending %d to %s", a.Amount, a.To))
			}
			// bank.Transfer(ctx, info.IdempotencyKey(), a.To, a.Amount)
			return "sent", nil
		})
	if err != nil {
		panic(err)
	}
	reg := tools.New()
	for _, t := range []tools.Tool{weather, transfer} {
		if err := reg.Register(t); err != nil {
			panic(err)
		}
	}
	for _, s := range reg.Specs() {
		fmt.Println(s.Name, s.Schema)
	}

	call := func(id, name, args string) turn.PendingCall {
		return turn.PendingCall{
			Call: turn.ToolCall{ID: id, Name: name, Arguments: args},
			Key:  turn.ReplayKey{Session: "s", Turn: "t", Iteration: 1, Kind: turn.KindToolCall, Effect: 2, Call: id},
		}
	}
	batch := &turn.ToolCalls{Calls: []turn.PendingCall{
		call("c1", "weather", `{"city":"Oslo"}`),
		call("c2", "transfer", `{"to":"bob","amount":5}`),
		call("c3", "weather", `{"town":"Oslo"}`),
		call("c4", "search", `{}`),
	}}
	results, err := tools.NewRunner(reg).RunBatch(context.Background(), batch, nil, nil)
	if err != nil {
		panic(err)
	}
	status := map[turn.ToolStatus]string{turn.ToolOK: "ok", turn.ToolError: "error", turn.ToolPending: "pending"}
	for _, r := range results {
		fmt.Println(r.CallID, status[r.Status], strings.TrimSpace(r.Output))
	}
	// Output:
	// transfer {"type":"object","properties":{"to":{"type":"string"},"amount":{"type":"integer"}},"required":["to","amount"],"additionalProperties":false}
	// weather {"type":"object","properties":{"city":{"type":"string","description":"the city to look up"},"units":{"type":"string","description":"celsius or fahrenheit"}},"required":["city"],"additionalProperties":false}
	// c1 ok sunny in Oslo
	// c2 pending approve sending 5 to bob
	// c3 error invalid arguments: unknown field "town" (known fields: "city", "units")
	// c4 error unknown tool "search"
}
