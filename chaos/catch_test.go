package chaos_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/chaos"
)

// The harness is known to be able to fail: with a guard removed on
// purpose, under the faults that guard stands against, the checker finds
// what gets through. Each case takes about a minute; LASH_CHAOS_CHECKS=1
// runs them (.ci/run does).
func TestChaosCatches(t *testing.T) {
	if os.Getenv("LASH_CHAOS_CHECKS") == "" {
		t.Skip("LASH_CHAOS_CHECKS is not set")
	}
	cases := []struct {
		name string
		cfg  chaos.Config
		// One of want is in at least one violation.
		want []string
	}{
		{"replay-off/kill-node", chaos.Config{Kinds: []chaos.FaultKind{chaos.KillNode}, BreakTags: "lash_break_replay", ModelDelay: time.Second},
			[]string{"after its outcome was recorded"}},
		{"client-keys-off/links-and-servers", chaos.Config{Kinds: []chaos.FaultKind{chaos.CutLinks, chaos.KillServer, chaos.PartitionServer, chaos.SlowLinks}, NoInputKeys: true,
			AckTimeout: 20 * time.Millisecond}, []string{"in the transcript"}},
		// A holder that keeps writing after its lease passed on, as one
		// whose clock froze with its VM does: without the fence its
		// commits land under an old token.
		{"fence-off/paused-and-cut-off-holders", chaos.Config{Kinds: []chaos.FaultKind{chaos.PauseNode, chaos.PartitionNode, chaos.OneWayNode},
			BreakTags: "lash_break_fence", ModelDelay: 500 * time.Millisecond},
			[]string{"while token", "after token", "committed twice"}},
	}
	for _, c := range cases {
		if f := os.Getenv("LASH_CHAOS_CHECK"); f != "" && !strings.Contains(c.name, f) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Seed, c.cfg.Length = 1, 30*time.Second
			rep := chaos.Run(t, c.cfg)
			t.Log("\n" + rep.Markdown())
			for _, v := range rep.Verdict.Violations {
				for _, w := range c.want {
					if strings.Contains(v, w) {
						return
					}
				}
			}
			t.Errorf("with the guard removed the checker found no violation with %q (%d others)", c.want, len(rep.Verdict.Violations))
		})
	}
}
