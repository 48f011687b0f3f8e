package main

import (
	"regexp"
	"strings"
	"testing"
)

// The demo's claims, on the built binary: the first worker dies in the
// middle; the second replays what it recorded, executes only the rest, and
// commits; the model ran twice in all and each tool once.
func TestDemo(t *testing.T) {
	code, out, stderr := runOnce(t, nil, "demo")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, want := range []string{
		"worker-1  made 1 model call and 3 tool runs",
		"worker-1  *** DIES *** at its second model call",
		"REPLAYED 6 effects from the journal, EXECUTED 2",
		"worker-2  committed turn in-1 at revision 4: natural-end",
		"in all: 2 model calls (worker-1 1, worker-2 1) and 3 tool runs (worker-1 3, worker-2 0)",
		"  assistant  Oslo 2C snow; Lima 18C grey; Pune 33C sun.",
		`  assistant  calls weather {"city":"Oslo"}, weather {"city":"Lima"}, weather {"city":"Pune"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The journal: six effects recorded by worker-1 and replayed, two
	// executed by worker-2.
	replayed := regexp.MustCompile(`(?m)^  \S+ \d+( call_\d)?\s+worker-1\s+replayed\s`)
	executed := regexp.MustCompile(`(?m)^  \S+ \d+\s+worker-2\s+EXECUTED\s`)
	if n := len(replayed.FindAllString(out, -1)); n != 6 {
		t.Errorf("%d journal lines replayed from worker-1, want 6:\n%s", n, out)
	}
	if n := len(executed.FindAllString(out, -1)); n != 2 {
		t.Errorf("%d journal lines executed by worker-2, want 2:\n%s", n, out)
	}
}
