package model

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// check is one verification run of lash.pml: the defines given to spin,
// whether SPIN must find a violation, and whether the verifier is worth
// optimizing (it then takes a third of the time to run, three times as
// long to compile: only the session's full search gains).
type check struct {
	name     string
	defines  []string
	violate  bool
	optimize bool
}

var checks = []check{
	{name: "session", defines: nil, optimize: true},
	{name: "process", defines: []string{"SCENE_PROCESS"}},

	{name: "session/NO_FENCE", defines: []string{"NO_FENCE"}, violate: true},
	{name: "session/NO_FENCE_TOKEN", defines: []string{"NO_FENCE_TOKEN"}, violate: true},
	{name: "session/NO_JOURNAL_CAS", defines: []string{"NO_JOURNAL_CAS"}, violate: true},
	{name: "session/NO_REPLAY", defines: []string{"NO_REPLAY"}, violate: true},
	{name: "session/NO_REFENCE", defines: []string{"NO_REFENCE"}, violate: true},
	{name: "session/NO_CURSOR", defines: []string{"NO_CURSOR"}, violate: true},
	{name: "session/NO_STAMP", defines: []string{"NO_STAMP"}, violate: true},
	{name: "process/NO_PROC_CAS", defines: []string{"SCENE_PROCESS", "NO_PROC_CAS"}, violate: true},
	{name: "process/NO_DLV_CAS", defines: []string{"SCENE_PROCESS", "NO_DLV_CAS"}, violate: true},
}

// TestModel checks the intact model (no violation in the whole bounded
// state space) and each mutant (a violation found): a model whose
// mutants all passed would check nothing.
func TestModel(t *testing.T) {
	spin, cc := tools(t)
	src, err := os.ReadFile("lash.pml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out := verify(t, spin, cc, src, c)
			errs := errorCount(t, out)
			switch {
			case c.violate && (errs == 0 || !strings.Contains(out, "assertion violated")):
				t.Fatalf("SPIN found no violated assertion with %v: the rule it removes is checked by nothing\n%s", c.defines, out)
			case !c.violate && errs != 0:
				t.Fatalf("SPIN found %d violation(s) in the intact model (replay: spin -t -p %s lash.pml)\n%s", errs, flags(c.defines), out)
			case !c.violate && strings.Contains(out, "max search depth too small"):
				t.Fatalf("the search was cut at its depth bound: raise -m\n%s", out)
			}
		})
	}
}

// tools finds spin and a C compiler, or skips: the model is checked where
// they are installed (apt-get install spin gcc), and required where
// LASH_REQUIRE_SPIN=1.
func tools(t *testing.T) (spin, cc string) {
	t.Helper()
	var missing []string
	spin, err := exec.LookPath("spin")
	if err != nil {
		missing = append(missing, "spin")
	}
	cc, err = exec.LookPath("cc")
	if err != nil {
		missing = append(missing, "cc")
	}
	if len(missing) > 0 {
		msg := "not on PATH: " + strings.Join(missing, ", ") + " (the protocol model is not checked)"
		if os.Getenv("LASH_REQUIRE_SPIN") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return spin, cc
}

// verify generates, compiles and runs a verifier for the model with
// defines, in a directory of its own, and returns what the verifier said.
// Each step is bounded in time, so a model grown too large fails the test
// instead of hanging it.
func verify(t *testing.T, spin, cc string, src []byte, c check) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lash.pml"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(flagList(c.defines), "-a", "lash.pml")
	run(t, dir, time.Minute, spin, args...)
	opt := "-O0"
	if c.optimize {
		opt = "-O1"
	}
	// SAFETY: assertions and invalid end states only (the properties are
	// all assertions); -w quiets warnings about generated code.
	run(t, dir, 2*time.Minute, cc, opt, "-w", "-DSAFETY", "-o", "pan", "pan.c")
	// -m bounds the depth; -n leaves out the list of unreached states.
	return run(t, dir, 2*time.Minute, filepath.Join(dir, "pan"), "-m100000", "-n")
}

func run(t *testing.T, dir string, limit time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no answer in %v\n%s", name, strings.Join(args, " "), limit, out)
	}
	// pan exits non-zero only on a failure of its own; a violation is
	// in its report.
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

var errorsLine = regexp.MustCompile(`errors: (\d+)`)

func errorCount(t *testing.T, out string) int {
	t.Helper()
	m := errorsLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no error count in the verifier's report:\n%s", out)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func flagList(defines []string) []string {
	var out []string
	for _, d := range defines {
		out = append(out, "-D"+d)
	}
	return out
}

func flags(defines []string) string { return strings.Join(flagList(defines), " ") }
