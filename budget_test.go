package lash

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// budgetScript asks for 1,000 sub-agents in one answer; each sub-agent
// asks for ten of its own, which only answer.
func budgetScript() string {
	var b strings.Builder
	b.WriteString("rule told\n  when notice contains [process\n  say noted\n\n")
	b.WriteString("rule grandchild\n  when user contains just answer\n  say answered\n\n")
	b.WriteString("rule child-spawn\n  when user contains help out\n  when tools = 0\n")
	for i := range 10 {
		fmt.Fprintf(&b, "  call spawn_agent {\"task\":\"just answer\",\"name\":\"g%d\"}\n", i)
	}
	b.WriteString("\nrule child-done\n  when user contains help out\n  when tools > 0\n  say helped\n\n")
	b.WriteString("rule many\n  when user contains ask many\n  when tools = 0\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  call spawn_agent {\"task\":\"help out\",\"name\":\"c%d\"}\n", i)
	}
	b.WriteString("\nrule many-done\n  when user contains ask many\n  when tools > 0\n  say asked\n")
	return b.String()
}

// One input asks for 1,000 sub-agents, and each of those asks for ten:
// a session starts at most its budget's share, the tree at most its
// budget in all, and every spawn past them is a failed call the model
// reads, recorded once.
func TestSubAgentBudget(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(budgetScript()))
	reg := tools.New()
	n := r.node("a", WithTools(reg), WithProjection(t.TempDir()), WithAgentBudget(5, 3))
	for _, tool := range n.ProcessTools() {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 3)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	go func() { n.RunProcesses(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })

	s := n.Session("lead")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "ask many"}); err != nil {
		t.Fatal(err)
	}
	var agents []*processes.Process
	testenv.WaitFor(t, 2*time.Minute, func() error {
		ps, _, err := n.Processes().List(ctx)
		if err != nil {
			return err
		}
		agents = agents[:0]
		for _, p := range ps {
			if p.Registration.Input.Kind == processes.SessionTurn {
				if !p.Ended() {
					return fmt.Errorf("sub-agent %s is %s", p.ID, p.Status())
				}
				agents = append(agents, p)
			}
		}
		if len(agents) < 5 {
			return fmt.Errorf("%d sub-agents ended", len(agents))
		}
		return nil
	})
	if len(agents) != 5 {
		t.Fatalf("%d sub-agents, want the tree's 5", len(agents))
	}
	depth := map[int]int{}
	for _, p := range agents {
		depth[p.Registration.Input.Depth]++
	}
	// The lead's calls and its sub-agents' own spawns race for the tree's
	// budget: the lead gets at most its 3, the tree 5 in all.
	lead := depth[1]
	if lead < 1 || lead > 3 || depth[1]+depth[2] != 5 {
		t.Fatalf("sub-agents by depth %v; want at most 3 of the lead's and 5 in all", depth)
	}
	// 1,000 calls in one turn take a while under the race detector; the
	// sub-agents' ends may join the lead's turn as inputs meanwhile, so
	// the answers to the calls are counted, not the last message.
	var started, refused int
	testenv.WaitFor(t, 2*time.Minute, func() error {
		tr, err := s.Transcript(ctx)
		if err != nil {
			return err
		}
		started, refused = 0, 0
		answered := 0
		for _, m := range tr {
			if m.Role != turn.RoleTool || m.Pending {
				continue
			}
			answered++
			switch {
			case !m.Error && strings.Contains(m.Text, `"process":`):
				// "started", or the sub-agent's status when a run of the
				// call in doubt (a retried turn) found it started already.
				started++
			case m.Error && strings.Contains(m.Text, "budget spent"):
				// The lead's own 3, or the tree's 5 once the sub-agents
				// spawned theirs: which is spent first is a race.
				refused++
			}
		}
		if answered < 1000 {
			return fmt.Errorf("%d of the 1000 calls answered in the transcript", answered)
		}
		return nil
	})
	if started != lead || refused != 1000-lead {
		t.Fatalf("the lead's spawns: %d started, %d refused; want %d and %d", started, refused, lead, 1000-lead)
	}
}
