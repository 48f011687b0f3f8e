package codemode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/codemode"
	"github.com/lash-run/lash/testenv"
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
	defer sb.Close()
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
	defer sb.Close()
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
// Run back to back, each would wait for a child to start (about 13 ms on
// two cores); a model call apart, the child started ahead is ready.
func BenchmarkSandboxRun(b *testing.B) {
	sb := &codemode.Sandbox{}
	defer sb.Close()
	benchRun(b, func(ctx context.Context, src string, h codemode.Host) (codemode.Result, error) {
		return sb.Run(ctx, src, tools, h, codemode.Limits{})
	})
}

func BenchmarkRun(b *testing.B) {
	benchRun(b, func(ctx context.Context, src string, h codemode.Host) (codemode.Result, error) {
		return codemode.Run(ctx, src, tools, h, codemode.Limits{})
	})
}

// benchRun times runs spaced as a turn spaces them, a model call apart
// (50 ms, untimed), which is when a child started ahead is ready.
func benchRun(b *testing.B, run func(context.Context, string, codemode.Host) (codemode.Result, error)) {
	src := `result = [get_weather(city=c)["temp"] for c in ["Oslo", "Rome", "Lima"]]`
	for range b.N {
		b.StopTimer()
		time.Sleep(50 * time.Millisecond)
		b.StartTimer()
		res, err := run(context.Background(), src, newJournal())
		if err != nil || res.Error != "" {
			b.Fatal(err, res.Error)
		}
	}
}

// A child is started ahead for the next program: runs one after another
// start no more children than runs and one, and Close stops the one left.
func TestSandboxStartsAhead(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var cmds []*exec.Cmd
	sb := &codemode.Sandbox{Command: func(ctx context.Context) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		mu.Lock()
		cmds = append(cmds, cmd)
		mu.Unlock()
		return cmd
	}}
	const runs = 4
	for range runs {
		res, err := sb.Run(context.Background(), `result = get_weather(city="Oslo")["temp"]`, tools, newJournal(), codemode.Limits{})
		if err != nil || string(res.Value) != "4" {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	sb.Close()
	testenv.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(cmds) > runs+1 {
			t.Fatalf("%d children started for %d runs", len(cmds), runs)
		}
		for i, cmd := range cmds {
			// Done once it ended and was waited for.
			if err := cmd.Process.Signal(syscall.Signal(0)); !errors.Is(err, os.ErrProcessDone) {
				return fmt.Errorf("child %d of %d still runs after Close (%v)", i, len(cmds), err)
			}
		}
		return nil
	})
	if _, err := sb.Run(context.Background(), `result = 1`, tools, newJournal(), codemode.Limits{}); err == nil {
		t.Fatal("a closed sandbox ran a program")
	}
}

// A child that runs programs one after another gives each its whole CPU
// bound, and still ends one that passes it.
func TestSandboxCPUBoundPerProgram(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU bound is Linux's")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var started atomic.Int32
	sb := &codemode.Sandbox{CPU: 3 * time.Second, Command: func(ctx context.Context) *exec.Cmd {
		started.Add(1)
		return exec.CommandContext(ctx, exe, "-test.run=^$")
	}}
	defer sb.Close()
	lim := codemode.Limits{Steps: 1 << 62, Quiet: time.Minute}
	// Programs that together spend more than the bound, each well within it.
	spend := func() time.Duration {
		start := time.Now()
		res, err := sb.Run(context.Background(), "x = 0\nfor i in range(1000000):\n  x += i\nresult = x", nil, newJournal(), lim)
		if err != nil || res.Error != "" {
			t.Fatalf("a program within its bound: %v %s", err, res.Error)
		}
		return time.Since(start)
	}
	took := spend()
	if took > 1500*time.Millisecond {
		t.Skipf("a program of 1M steps took %s here: too slow to tell bounds apart", took)
	}
	for spent := took; spent < 4*time.Second; spent += took {
		spend()
	}
	if n := started.Load(); n != 1 {
		t.Fatalf("%d children ran the programs, want one", n)
	}
	res, err := sb.Run(context.Background(), "while True:\n  pass", nil, newJournal(), lim)
	if err != nil || res.Error != "the program used more than 3s of CPU time" {
		t.Fatalf("a program past its CPU bound: %v, %q", err, res.Error)
	}
}
