package chaos_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/chaos"
)

// TestChaosLong is the long run: LASH_CHAOS (a duration, e.g. 30m) of
// faults split among the seeds of LASH_CHAOS_SEEDS (default 1,2,3), each
// on a fleet of its own. With LASH_CHAOS_REPORT (a directory) it keeps
// the report there: docs/chaos holds the latest, which the README quotes.
func TestChaosLong(t *testing.T) {
	total := os.Getenv("LASH_CHAOS")
	if total == "" {
		t.Skip("LASH_CHAOS is not set")
	}
	length, err := time.ParseDuration(total)
	if err != nil {
		t.Fatalf("LASH_CHAOS: %v", err)
	}
	var seeds []uint64
	for _, s := range strings.Split(envOr("LASH_CHAOS_SEEDS", "1,2,3"), ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			t.Fatalf("LASH_CHAOS_SEEDS: %v", err)
		}
		seeds = append(seeds, n)
	}
	rs := &chaos.Reports{}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rs.Runs = append(rs.Runs, runSeed(t, chaos.Config{Seed: seed, Length: length / time.Duration(len(seeds))}))
		})
	}
	if t.Failed() {
		t.Fatal("a seed's run failed: no report is kept")
	}
	rs.At = time.Now().UTC()
	t.Log(rs.Totals().Quote())
	if dir := os.Getenv("LASH_CHAOS_REPORT"); dir != "" {
		if err := rs.Write(dir); err != nil {
			t.Fatal(err)
		}
		t.Logf("report kept in %s", filepath.Join(dir, "report.md"))
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// The README quotes the latest long run's report (docs/chaos): the
// figures must be the report's. LASH_CHAOS_UPDATE_README=1 writes them in.
func TestReadmeQuotesChaosReport(t *testing.T) {
	rs, err := chaos.ReadReports(filepath.Join("..", "docs", "chaos"))
	if err != nil {
		t.Fatal(err)
	}
	if n := rs.Totals().Violations; n > 0 {
		t.Errorf("the kept report has %d violations", n)
	}
	const begin, end = "<!-- chaos-report -->", "<!-- /chaos-report -->"
	path := filepath.Join("..", "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(readme), begin)
	quoted, after, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("README.md has no %s ... %s block", begin, end)
	}
	want := "\n" + rs.Totals().Quote() + "\n"
	if quoted == want {
		return
	}
	if os.Getenv("LASH_CHAOS_UPDATE_README") != "" {
		if err := os.WriteFile(path, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md quotes\n%s\nbut docs/chaos/report.json says\n%s\n(LASH_CHAOS_UPDATE_README=1 go test ./chaos -run TestReadmeQuotesChaosReport writes it in)", quoted, want)
}
