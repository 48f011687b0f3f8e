package main

import (
	"strings"
	"testing"
)

// The demo's own claims: the turn finishes on the second worker, the model
// answers twice in all (once per inference) and each tool runs once,
// although the first worker died in the middle of the batch.
func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"worker-2: committed in-1",
		"in all: 2 model calls, 3 tool runs",
		"natural-end",
		"assistant: Oslo 2C snow; Lima 18C grey; Pune 33C sun.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
