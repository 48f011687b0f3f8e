package turn

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The machine must stay pure: no IO, clock, randomness or goroutines. These
// are what a non-test file of this package may not import or call.
var (
	// internal/pack only appends bytes (TestPackIsPure).
	allowedNonStdImports = []string{"github.com/vmihailenco/msgpack/v5", "github.com/lash-run/lash/internal/pack"}
	forbiddenImports     = []string{
		"os", "math/rand", "math/rand/v2", "crypto/rand", "net", "net/http",
		"io/ioutil", "syscall", "unsafe",
	}
	forbiddenTimeFuncs = []string{"Now", "Since", "Until", "Sleep", "After", "Tick", "NewTimer"}
)

func TestImportsArePure(t *testing.T) { checkPure(t, ".", allowedNonStdImports) }

// The byte appender the machine uses imports the standard library alone.
func TestPackIsPure(t *testing.T) { checkPure(t, "../internal/pack", nil) }

func checkPure(t *testing.T, dir string, allowed []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", name, err)
		}
		checked++
		for _, v := range purityViolations(fset, f, allowed) {
			t.Error(v)
		}
	}
	if checked == 0 {
		t.Fatal("found no non-test Go files to check")
	}
}

// purityViolations lists, as "file:line: what", every import and call that
// would let the machine reach the world.
func purityViolations(fset *token.FileSet, f *ast.File, allowed []string) []string {
	var out []string
	report := func(n ast.Node, format string, args ...any) {
		out = append(out, fset.Position(n.Pos()).String()+": "+fmt.Sprintf(format, args...))
	}

	// The local names under which "time" is imported.
	timeNames := map[string]bool{}
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			report(imp, "unreadable import %s", imp.Path.Value)
			continue
		}
		switch {
		case slices.Contains(forbiddenImports, path):
			report(imp, "imports %q", path)
		case !isStdlib(path) && !slices.Contains(allowed, path):
			report(imp, "imports %q, which is neither the standard library nor one allowed (%v)", path, allowed)
		}
		if path != "time" {
			continue
		}
		switch {
		case imp.Name == nil:
			timeNames["time"] = true
		case imp.Name.Name == ".":
			report(imp, `dot-imports "time"; its clock functions would be unqualified`)
		case imp.Name.Name != "_":
			timeNames[imp.Name.Name] = true
		}
	}

	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			report(n, "starts a goroutine")
		case *ast.SelectorExpr:
			// Any use counts, not only a call: a method value such as
			// clock := time.Now reaches the clock just the same.
			if id, ok := n.X.(*ast.Ident); ok && timeNames[id.Name] && slices.Contains(forbiddenTimeFuncs, n.Sel.Name) {
				report(n, "uses %s.%s", id.Name, n.Sel.Name)
			}
		}
		return true
	})
	return out
}

// isStdlib reports whether an import path is in the standard library: its
// first element has no dot.
func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// TestPurityCheckerCatchesViolations makes sure the checker above is not
// vacuous: each fixture must produce exactly the violations listed.
func TestPurityCheckerCatchesViolations(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // substrings, one per expected violation, in order
	}{
		{"clean", `package p
import (
	"fmt"
	"time"
	"github.com/vmihailenco/msgpack/v5"
)
var _ = msgpack.Marshal
func f(d time.Duration) string { return fmt.Sprint(d + time.Second) }`, nil},
		{"forbidden imports", `package p
import (
	"os"
	"math/rand/v2"
	"net/http"
	"unsafe"
	"github.com/other/dep"
)`, []string{`3:2: imports "os"`, `imports "math/rand/v2"`, `imports "net/http"`, `imports "unsafe"`, `"github.com/other/dep", which is neither`}},
		{"clock", `package p
import "time"
func f() {
	_ = time.Now()
	time.Sleep(1)
	<-time.After(1)
	clock := time.Since
	_ = clock
}`, []string{"4:6: uses time.Now", "uses time.Sleep", "uses time.After", "uses time.Since"}},
		{"renamed time", `package p
import tm "time"
func f() { _ = tm.Now(); _ = tm.NewTimer(1); _ = tm.Tick(1); _ = tm.Until(tm.Time{}) }`,
			[]string{"uses tm.Now", "uses tm.NewTimer", "uses tm.Tick", "uses tm.Until"}},
		{"dot time", `package p
import . "time"
func f() { _ = Now() }`, []string{`dot-imports "time"`}},
		{"a Now that is not the clock", `package p
type clock struct{ Now func() int }
func f(time clock) int { return time.Now() }`, nil},
		{"goroutine", `package p
func f() { go func() {}() }`, []string{"2:12: starts a goroutine"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "fixture.go", tc.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			got := purityViolations(fset, f, allowedNonStdImports)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d violations, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d is %q, want it to mention %q", i, got[i], w)
				}
			}
		})
	}
}
