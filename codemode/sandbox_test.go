package codemode_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/lash-run/lash/codemode"
)

// A program in a sandbox makes its calls through the host of the process
// that started it, as one run in-process does.
func TestSandboxCalls(t *testing.T) {
	src := `
a = get_weather(city="Oslo")
rs = parallel([call(get_weather, city="Rome"), call(break_it)])
print("temp", a["temp"])
result = [a["temp"], rs[0].value["temp"], rs[1].error, llm("hi")]
`
	sb := &codemode.Sandbox{}
	j := newJournal()
	res, err := sb.Run(context.Background(), src, tools, j, codemode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := `[4,4,"it broke","the model says: hi"]`
	if res.Error != "" || string(res.Value) != want || res.Output != "temp 4\n" || res.Calls != 4 || len(j.made) != 4 {
		t.Fatalf("%+v (made %d), want %s", res, len(j.made), want)
	}
	// Run again, in a new child: every call answered from the journal.
	again, err := sb.Run(context.Background(), src, tools, j, codemode.Limits{})
	if err != nil || string(again.Value) != want || len(j.made) != 4 {
		t.Fatalf("again: %+v, %v (made %d)", again, err, len(j.made))
	}
	// A host's error cuts the program and is the sandbox's.
	j = newJournal()
	j.park = codemode.KindModel
	if _, err := sb.Run(context.Background(), src, tools, j, codemode.Limits{}); !errors.Is(err, errParked) {
		t.Fatalf("a park: %v", err)
	}
}

// What the interpreter cannot bound ends the child, and the program with
// a readable error, within the sandbox's bounds.
func TestSandboxBounds(t *testing.T) {
	sb := &codemode.Sandbox{Memory: 256 << 20, CPU: 5 * time.Second}
	for _, c := range []struct {
		name, src string
		want      string
	}{
		// 3^20 bytes, 3.5 GB, in 40 steps.
		{"memory", "s = \"x\"\nfor i in range(20):\n    s = s + s + s\nresult = len(s)", "more than 256 MiB of memory"},
		// One step that recurses three million deep.
		{"deep", "a = []\nfor i in range(3000000):\n    a = [a]\nresult = len(str(a))", "memory|nested|CPU|without a call"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := sb.Run(context.Background(), c.src, tools, newJournal(), codemode.Limits{Steps: 1 << 40, Quiet: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(c.want).MatchString(res.Error) {
				t.Fatalf("error %q, want %q", res.Error, c.want)
			}
		})
	}
}

// BenchmarkSandboxRun: a program of three calls run in a sandbox's child,
// against BenchmarkRun, the same in-process: what a child costs a run.
func BenchmarkSandboxRun(b *testing.B) {
	benchRun(b, func(ctx context.Context, src string, h codemode.Host) (codemode.Result, error) {
		return (&codemode.Sandbox{}).Run(ctx, src, tools, h, codemode.Limits{})
	})
}

func BenchmarkRun(b *testing.B) {
	benchRun(b, func(ctx context.Context, src string, h codemode.Host) (codemode.Result, error) {
		return codemode.Run(ctx, src, tools, h, codemode.Limits{})
	})
}

func benchRun(b *testing.B, run func(context.Context, string, codemode.Host) (codemode.Result, error)) {
	src := `result = [get_weather(city=c)["temp"] for c in ["Oslo", "Rome", "Lima"]]`
	for b.Loop() {
		res, err := run(context.Background(), src, newJournal())
		if err != nil || res.Error != "" {
			b.Fatal(err, res.Error)
		}
	}
}
