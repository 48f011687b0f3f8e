package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/codemode"
)

var tools = []codemode.Tool{{Name: "get_weather"}, {Name: "break_it"}, {Name: "slow-search"}, {Name: "len"}, {Name: "get-x"}, {Name: "get_x"}}

// journal is a host that records each call's outcome by ordinal and
// answers a recorded ordinal from the record, as a durable host does: made
// counts the calls it really made.
type journal struct {
	mu       sync.Mutex
	recorded map[int]codemode.Call
	outcomes map[int]codemode.Outcome
	made     []codemode.Call
	// park, if set, cuts the program at the first call of that kind the
	// first time it is made (the call parks; the program runs again).
	park   codemode.Kind
	parked bool
}

var errParked = errors.New("parked")

func newJournal() *journal {
	return &journal{recorded: map[int]codemode.Call{}, outcomes: map[int]codemode.Outcome{}}
}

func (j *journal) Do(_ context.Context, calls []codemode.Call) ([]codemode.Outcome, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	outs := make([]codemode.Outcome, len(calls))
	for i, c := range calls {
		if rec, ok := j.recorded[c.Ordinal]; ok {
			if rec.Kind != c.Kind || rec.Tool != c.Tool || string(rec.Args) != string(c.Args) {
				return nil, fmt.Errorf("nondeterminism at call %d: %s%s, recorded %s%s", c.Ordinal, c.Tool, c.Args, rec.Tool, rec.Args)
			}
			outs[i] = j.outcomes[c.Ordinal]
			continue
		}
		if c.Kind == j.park && !j.parked {
			j.parked = true
			return nil, errParked
		}
		j.made = append(j.made, c)
		outs[i] = answer(c)
		j.recorded[c.Ordinal], j.outcomes[c.Ordinal] = c, outs[i]
	}
	return outs, nil
}

func answer(c codemode.Call) codemode.Outcome {
	var args map[string]any
	_ = json.Unmarshal(c.Args, &args)
	switch c.Kind {
	case codemode.KindModel:
		b, _ := json.Marshal("the model says: " + args["prompt"].(string))
		return codemode.Outcome{Value: b}
	case codemode.KindSleep:
		return codemode.Outcome{}
	}
	switch c.Tool {
	case "get_weather":
		city, _ := args["city"].(string)
		if city == "Atlantis" {
			return codemode.Outcome{Error: "no such city"}
		}
		b, _ := json.Marshal(map[string]any{"city": city, "temp": len(city)})
		return codemode.Outcome{Value: b}
	case "break_it", "len":
		return codemode.Outcome{Error: "it broke"}
	case "slow-search":
		return codemode.Outcome{Cancelled: true}
	}
	return codemode.Outcome{Error: "unknown tool " + c.Tool}
}

func run(t *testing.T, src string, h codemode.Host, lim codemode.Limits) codemode.Result {
	t.Helper()
	res, err := codemode.Run(context.Background(), src, tools, h, lim)
	if err != nil {
		t.Fatalf("host error: %v", err)
	}
	return res
}

func TestCallsInSequence(t *testing.T) {
	j := newJournal()
	res := run(t, `
w = get_weather(city="Oslo")
print("temp", w["temp"])
summary = llm("summarise " + w["city"])
sleep(2)
result = {"summary": summary, "temp": w["temp"]}
`, j, codemode.Limits{})
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	if string(res.Value) != `{"summary":"the model says: summarise Oslo","temp":4}` || res.Output != "temp 4\n" || res.Calls != 3 {
		t.Fatalf("result %s, output %q, calls %d", res.Value, res.Output, res.Calls)
	}
	want := []string{`0 tool get_weather {"city":"Oslo"}`, `1 llm  {"prompt":"summarise Oslo"}`, `2 sleep  {"seconds":2}`}
	var got []string
	for _, c := range j.made {
		got = append(got, fmt.Sprintf("%d %s %s %s", c.Ordinal, c.Kind, c.Tool, c.Args))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
}

// A program cut at a call that parks runs again from its start: the calls
// recorded before it are answered from the record, not made again, and
// the program ends as an uncut run does.
func TestParkAndRunAgain(t *testing.T) {
	src := `
a = get_weather(city="Oslo")
b = get_weather(city="Rome")
c = llm("compare %d and %d" % (a["temp"], b["temp"]))
result = c
`
	j := newJournal()
	j.park = codemode.KindModel
	if _, err := codemode.Run(context.Background(), src, tools, j, codemode.Limits{}); !errors.Is(err, errParked) {
		t.Fatalf("first run: %v, want the park", err)
	}
	res := run(t, src, j, codemode.Limits{})
	if string(res.Value) != `"the model says: compare 4 and 4"` {
		t.Fatalf("result %s (%s)", res.Value, res.Error)
	}
	if len(j.made) != 3 {
		t.Fatalf("%d calls made, want each of 3 once: %v", len(j.made), j.made)
	}
	// A third run makes no call at all.
	res = run(t, src, j, codemode.Limits{})
	if len(j.made) != 3 || string(res.Value) != `"the model says: compare 4 and 4"` {
		t.Fatalf("replay made calls: %v, %s", j.made, res.Value)
	}
}

// A program that takes another path at a recorded ordinal is told by its
// host, whose error cuts it.
func TestAnotherPath(t *testing.T) {
	j := newJournal()
	run(t, `get_weather(city="Oslo")`, j, codemode.Limits{})
	_, err := codemode.Run(context.Background(), `get_weather(city="Bergen")`, tools, j, codemode.Limits{})
	if err == nil || !strings.Contains(err.Error(), "nondeterminism at call 0") {
		t.Fatalf("another call at ordinal 0: %v", err)
	}
}

func TestParallelMixedOutcomes(t *testing.T) {
	j := newJournal()
	res := run(t, `
rs = parallel([call(get_weather, city="Oslo"), call(break_it), call(tool, "slow-search", q="x"), call(get_weather, {"city": "Atlantis"})])
result = [[r.ok, r.value, r.error, r.cancelled] for r in rs]
`, j, codemode.Limits{})
	want := `[[true,{"city":"Oslo","temp":4},null,false],[false,null,"it broke",false],[false,null,"cancelled",true],[false,null,"no such city",false]]`
	if res.Error != "" || string(res.Value) != want {
		t.Fatalf("result %s (%s), want %s", res.Value, res.Error, want)
	}
	var ords []int
	for _, c := range j.made {
		ords = append(ords, c.Ordinal)
	}
	if !slices.Equal(ords, []int{0, 1, 2, 3}) {
		t.Fatalf("ordinals %v", ords)
	}
}

// call(tool, "name") describes a call of a tool by its name; the target
// of call() and attempt() must be a tool, llm or sleep.
func TestNamedToolAndTargets(t *testing.T) {
	res := run(t, `result = [parallel([call(tool, "slow-search")])[0].cancelled, attempt(tool, "len").error]`, newJournal(), codemode.Limits{})
	if res.Error != "" || string(res.Value) != `[true,"it broke"]` {
		t.Fatalf("call and attempt of tool(name): %s (%s)", res.Value, res.Error)
	}
	res = run(t, `result = attempt(len, [1])`, newJournal(), codemode.Limits{})
	if !strings.Contains(res.Error, "is not a tool") {
		t.Fatalf("attempt(len): %q", res.Error)
	}
	res = run(t, `result = tool("slow-search")`, newJournal(), codemode.Limits{})
	if !strings.Contains(res.Error, "slow-search: cancelled") {
		t.Fatalf("tool(name): %q", res.Error)
	}
}

func TestFailures(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`break_it()`, "break_it failed: it broke"},
		{`r = attempt(break_it)
result = r.error`, ""},
		{`x = 1 +`, "got end of file"},
		{`undefined_name()`, "undefined: undefined_name"},
		{`def f(n):
    return f(n)
f(1)`, "called recursively"},
		{`result = get_weather`, "result: a builtin_function_or_method has no JSON form"},
		{`get_weather(1, 2)`, "arguments by keyword, or one dict"},
	} {
		res := run(t, c.src, newJournal(), codemode.Limits{})
		if c.want == "" {
			if res.Error != "" || string(res.Value) != `"it broke"` {
				t.Errorf("%q: %s, %q", c.src, res.Value, res.Error)
			}
			continue
		}
		if !strings.Contains(res.Error, c.want) {
			t.Errorf("%q: error %q, want %q", c.src, res.Error, c.want)
		}
	}
}

func TestLimits(t *testing.T) {
	for _, c := range []struct {
		name, src string
		lim       codemode.Limits
		want      string
	}{
		{"steps", "while True:\n    pass", codemode.Limits{Steps: 100000}, "more than 100000 steps"},
		{"output", "for i in range(1000000):\n    print(\"x\" * 100)", codemode.Limits{Output: 1 << 20}, "printed more than 1048576 bytes"},
		{"calls", "for i in range(10000):\n    get_weather(city=\"Oslo\")", codemode.Limits{Calls: 50}, "more than 50 calls"},
		{"fanout", "parallel([call(break_it) for i in range(100)])", codemode.Limits{Fanout: 10}, "100 calls, at most 10"},
		{"source", strings.Repeat("x = 1\n", 2000), codemode.Limits{Source: 1000}, "at most 1000"},
		{"arguments", `get_weather(city="x" * 2000)`, codemode.Limits{Value: 1000}, "arguments: more than 1000 bytes"},
		{"result", `result = "x" * 2000`, codemode.Limits{Value: 1000}, "result: more than 1000 bytes"},
		// Nested twice over, 2^60 leaves: refused at the bound, not spelled out.
		{"shared", "a = [1]\nfor i in range(60):\n    a = [a, a]\nresult = a", codemode.Limits{Value: 1000}, "result: more than 1000 bytes"},
		{"json", `x = json.decode("[" * 100000)`, codemode.Limits{}, "nested deeper than 64"},
		{"error", `fail("x" * 100000)`, codemode.Limits{Output: 1000}, "…"},
		{"quiet", "while True:\n    pass", codemode.Limits{Steps: 1 << 62, Quiet: 200 * time.Millisecond}, "without a call"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := newJournal()
			res := run(t, c.src, j, c.lim)
			if !strings.Contains(res.Error, c.want) {
				t.Fatalf("error %q, want %q", res.Error, c.want)
			}
			if c.name == "calls" && len(j.made) != 50 {
				t.Fatalf("%d calls made, want the 50 allowed", len(j.made))
			}
			if c.name == "error" && len(res.Error) > 1000+len("…") {
				t.Fatalf("an error of %d bytes", len(res.Error))
			}
			if c.name == "output" && len(res.Output) > 1<<20 {
				t.Fatalf("kept %d bytes of output", len(res.Output))
			}
		})
	}
}

// Values cross the edge as JSON, in order: a dict's keys keep their order,
// big integers and floats survive, and the same outcome bytes make the
// same value on every run.
func TestValues(t *testing.T) {
	h := hostFunc(func(calls []codemode.Call) []codemode.Outcome {
		return []codemode.Outcome{{Value: json.RawMessage(`{"z":1,"a":[true,null,1.5,"s"],"big":123456789012345678901234567890}`)}}
	})
	res := run(t, `
v = get_weather(city="x")
result = {"keys": list(v.keys()), "big": v["big"] + 1, "a": v["a"], "t": (1, 2)}
`, h, codemode.Limits{})
	want := `{"keys":["z","a","big"],"big":123456789012345678901234567891,"a":[true,null,1.5,"s"],"t":[1,2]}`
	if res.Error != "" || string(res.Value) != want {
		t.Fatalf("%s (%s), want %s", res.Value, res.Error, want)
	}
}

type hostFunc func([]codemode.Call) []codemode.Outcome

func (f hostFunc) Do(_ context.Context, calls []codemode.Call) ([]codemode.Outcome, error) {
	return f(calls), nil
}

// A tool named as a Starlark builtin (len), or two tools sharing a name
// once '-' is '_' (get-x, get_x), are called by tool("name") only, and
// Describe says so; Starlark's len stays len.
func TestToolNames(t *testing.T) {
	res := run(t, `result = [len([1, 2]), attempt(tool, "len").error, attempt(tool, "get-x").ok]`, newJournal(), codemode.Limits{})
	if res.Error != "" || string(res.Value) != `[2,"it broke",false]` {
		t.Fatalf("%s (%s)", res.Value, res.Error)
	}
	res = run(t, `get_x()`, newJournal(), codemode.Limits{})
	if !strings.Contains(res.Error, "undefined: get_x") {
		t.Fatalf("get_x: %q", res.Error)
	}
	d := codemode.Describe(tools)
	for _, want := range []string{"tool(\"len\")", "tool(\"get-x\")", "tool(\"get_x\")", "slow_search("} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe lacks %s:\n%s", want, d)
		}
	}
}
