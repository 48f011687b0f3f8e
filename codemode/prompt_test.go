package codemode_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lash-run/lash/codemode"
)

func TestDescribe(t *testing.T) {
	got := codemode.Describe([]codemode.Tool{
		{Name: "get_weather", Description: "The weather\n in a city.", Schema: json.RawMessage(`{"type":"object",
			"properties":{"city":{"type":"string","description":"its name"},"units":{"enum":["c","f"]},"days":{"type":["integer","null"]}},
			"required":["city"]}`)},
		{Name: "slow-search", Schema: json.RawMessage(`{"properties":{"q":{"type":"string"}}}`)},
		{Name: "odd tool", Schema: json.RawMessage(`not json`)},
		{Name: "headers", Schema: json.RawMessage(`{"properties":{"content-type":{"type":"string"}},"required":["content-type"]}`)},
	})
	want := `get_weather(city: str, units: one of "c", "f" = None, days: int | None = None)
    The weather in a city.
    city: its name
slow_search(q: str = None)
tool("odd tool")
headers({...})
    "content-type": str, required
`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// What it describes is what a program calls.
	j := newJournal()
	res := run(t, `result = [get_weather(city="Oslo")["temp"], attempt(slow_search, q="x").cancelled]`, j, codemode.Limits{})
	if res.Error != "" || string(res.Value) != `[4,true]` {
		t.Fatalf("%s (%s)", res.Value, res.Error)
	}
	if !strings.Contains(codemode.Guide, "parallel(") {
		t.Fatal("the guide does not say how to fan out")
	}
}
