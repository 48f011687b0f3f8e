package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/tools/natstool"
)

// agentFlags are the flags of the agents commands.
type agentFlags struct {
	file         string
	ifRevision   int
	allowUnknown bool
	dryRun       bool
}

func ifRevisionFlag(a *app, fs *flag.FlagSet) {
	fs.IntVar(&a.agent.ifRevision, "if-revision", -1, "change the agent only if it is at this `revision` (0: only if it does not exist)")
}

var agentsApplyCmd = &command{
	name:    "agents apply",
	summary: "create or change agents from a definition file",
	doc: `Reads agent definitions (YAML, several separated by ---, or JSON) from --file (- for
stdin), checks every one, then stores each as its agent's next revision on the AGENTS
stream (<prefix>.agent.<name>). A definition the agent already has changes nothing. If
any definition is invalid, nothing is written. Tools must be built-ins, served over
NATS now, or offered by a running node (its MCP servers' tools, Go tools linked into it);
--allow-unknown-tools takes others (a tool server not running yet).`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.agent.file, "f", "", "the definition `file` (- for stdin)")
		fs.StringVar(&a.agent.file, "file", "", "the definition `file` (- for stdin)")
		fs.BoolVar(&a.agent.allowUnknown, "allow-unknown-tools", false, "accept tools the deployment does not serve now")
		fs.BoolVar(&a.agent.dryRun, "dry-run", false, "check the definitions and say what would change, writing nothing")
		ifRevisionFlag(a, fs)
	},
	check: func(a *app, _ []string) error {
		if a.agent.file == "" {
			return a.usagef("give the definition file: -f FILE (- for stdin)")
		}
		return nil
	},
	run: runAgentsApply,
}

var agentsLsCmd = &command{
	name:    "agents ls",
	summary: "agents and their current revisions",
	doc:     `Lists the agents not deleted, each at its current revision: version, provider, model, tools, labels.`,
	run:     runAgentsLs,
}

var agentsShowCmd = &command{
	name:    "agents show",
	args:    "NAME[@REVISION]",
	summary: "an agent's definition",
	doc: `Prints an agent's definition as a definition file, at its current revision or the one
named: NAME@N (revision N) or NAME@HEX (the version starting with those hex digits, 8
at least). A deleted agent's revisions stay readable.`,
	min: 1, max: 1,
	run: runAgentsShow,
}

var agentsHistoryCmd = &command{
	name:    "agents history",
	args:    "NAME",
	summary: "every revision of an agent",
	doc:     `Lists an agent's revisions, oldest first: version, whether it was applied or deleted, by whom and when.`,
	min:     1, max: 1,
	run: runAgentsHistory,
}

var agentsDiffCmd = &command{
	name:    "agents diff",
	args:    "NAME[@REVISION] [NAME[@REVISION]]",
	summary: "what changed between two revisions of agents",
	doc: `Prints the lines that differ between two definitions (- before, + after). With one
argument NAME, the agent's last two versions; with one NAME@REVISION, that revision and
the current one.`,
	min: 1, max: 2,
	run: runAgentsDiff,
}

var agentsDeleteCmd = &command{
	name:    "agents delete",
	args:    "NAME",
	summary: "delete an agent, keeping its revisions",
	doc: `Deletes an agent: a revision that says so, after which ls does not list it. Its earlier
revisions stay readable, and applying it again goes on from there.`,
	min: 1, max: 1,
	flags: ifRevisionFlag,
	run:   runAgentsDelete,
}

func (a *app) agents() *agents.Agents { return agents.New(a.client, "lash-admin") }

func runAgentsApply(a *app, _ []string) error {
	var data []byte
	var err error
	if a.agent.file == "-" {
		data, err = io.ReadAll(io.LimitReader(a.stdin, 4*agents.MaxDefinitionBytes+1))
	} else {
		data, err = os.ReadFile(a.agent.file)
	}
	if err != nil {
		return err
	}
	defs, err := agents.Parse(data)
	if err != nil {
		return a.usagef("%s", strings.TrimPrefix(err.Error(), "agents: "))
	}
	known, err := a.knownTools()
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, d := range defs {
		if err := d.Check(known); err != nil {
			msg := strings.TrimPrefix(err.Error(), "agents: ")
			if strings.Contains(msg, "no such tool") {
				msg += " (--allow-unknown-tools takes it)"
			}
			return a.usagef("%s", msg)
		}
		if names[d.Name] {
			return a.usagef("agent %q is defined twice in the file", d.Name)
		}
		names[d.Name] = true
	}
	type result struct {
		Agent    string `json:"agent"`
		Revision int    `json:"revision"`
		Version  string `json:"version"`
		Changed  bool   `json:"changed"`
	}
	out := struct {
		DryRun bool     `json:"dry_run,omitempty"`
		Agents []result `json:"agents"`
	}{DryRun: a.agent.dryRun}
	store := a.agents()
	for _, d := range defs {
		if a.agent.dryRun {
			cur, err := store.Get(a.ctx, d.Name)
			switch {
			case errors.Is(err, agents.ErrNotFound):
				out.Agents = append(out.Agents, result{d.Name, 0, d.Version(), true})
			case err != nil:
				return err
			default:
				out.Agents = append(out.Agents, result{d.Name, cur.Revision, d.Version(), cur.Version != d.Version()})
			}
			continue
		}
		r, changed, err := store.Apply(a.ctx, d, a.agent.ifRevision)
		if err != nil {
			return err
		}
		out.Agents = append(out.Agents, result{d.Name, r.Revision, r.Version, changed})
	}
	return a.emit(out, func(w io.Writer) {
		for _, r := range out.Agents {
			what := "unchanged"
			switch {
			case r.Changed && a.agent.dryRun:
				what = "would change"
			case r.Changed:
				what = "applied"
			}
			row(w, r.Agent, what, fmt.Sprintf("revision %d", r.Revision), "version "+short(r.Version))
		}
	})
}

// knownTools says which tools a definition may name: the built-ins and
// those served over NATS now; nil (any) with --allow-unknown-tools.
func (a *app) knownTools() (func(string) bool, error) {
	if a.agent.allowUnknown {
		return nil, nil
	}
	have := map[string]bool{}
	for _, n := range builtin.Names() {
		have[n] = true
	}
	served, err := natstool.Discover(a.ctx, a.nc, a.client.Config().Prefix)
	if err != nil {
		return nil, fmt.Errorf("discovering the tools served over NATS: %w", err)
	}
	for _, t := range served {
		have[t.Spec().Name] = true
	}
	// And what the running nodes offer: MCP servers' tools and Go tools
	// linked into them. No node running is no more to learn.
	infos, _ := nodeapi.NewClient(a.nc, a.client.Config().Prefix).Nodes(a.ctx)
	for _, info := range infos {
		for _, name := range info.Tools {
			have[name] = true
		}
	}
	return func(tool string) bool { return have[tool] }, nil
}

type agentJSON struct {
	Name        string            `json:"name"`
	Revision    int               `json:"revision"`
	Version     string            `json:"version"`
	Provider    string            `json:"provider"`
	Model       string            `json:"model"`
	Tools       []string          `json:"tools"`
	Labels      map[string]string `json:"labels,omitempty"`
	Description string            `json:"description,omitempty"`
	Changed     time.Time         `json:"changed"`
	By          string            `json:"by"`
}

func agentRow(r *agents.Record) agentJSON {
	d := r.Definition
	return agentJSON{Name: d.Name, Revision: r.Revision, Version: r.Version, Provider: d.Provider, Model: d.Model,
		Tools: append([]string{}, d.Tools...), Labels: d.Labels, Description: d.Description, Changed: utc(r.At), By: r.By}
}

func runAgentsLs(a *app, _ []string) error {
	list, bad, err := a.agents().List(a.ctx)
	if err != nil {
		return err
	}
	out := struct {
		Agents     []agentJSON       `json:"agents"`
		Unreadable map[string]string `json:"unreadable,omitempty"`
	}{Agents: []agentJSON{}}
	for _, r := range list {
		out.Agents = append(out.Agents, agentRow(r))
	}
	slices.SortFunc(out.Agents, func(x, y agentJSON) int { return strings.Compare(x.Name, y.Name) })
	for subj, err := range bad {
		if out.Unreadable == nil {
			out.Unreadable = map[string]string{}
		}
		out.Unreadable[subj] = err.Error()
	}
	return a.emit(out, func(w io.Writer) {
		if len(out.Agents) == 0 && len(out.Unreadable) == 0 {
			fmt.Fprintln(w, "no agents (lash-admin agents apply -f FILE makes one)")
			return
		}
		row(w, "NAME", "REVISION", "VERSION", "PROVIDER", "MODEL", "TOOLS", "LABELS", "CHANGED")
		for _, g := range out.Agents {
			row(w, g.Name, g.Revision, short(g.Version), g.Provider, g.Model, strings.Join(g.Tools, ","), labels(g.Labels), fmtTime(g.Changed))
		}
		for subj, e := range out.Unreadable {
			row(w, subj, "unreadable", e)
		}
	})
}

func labels(m map[string]string) string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

// short is a version as tables show it.
func short(version string) string {
	if len(version) > 12 {
		return version[:12]
	}
	return version
}

func (a *app) resolveAgent(ref string) (*agents.Record, error) {
	r, err := a.agents().Resolve(a.ctx, ref)
	if errors.Is(err, agents.ErrInvalid) {
		return nil, a.usagef("%s", strings.TrimPrefix(err.Error(), "agents: "))
	}
	if errors.Is(err, agents.ErrNotFound) {
		return nil, fmt.Errorf("no agent %q", ref)
	}
	return r, err
}

func runAgentsShow(a *app, args []string) error {
	r, err := a.resolveAgent(args[0])
	if err != nil {
		return err
	}
	out := struct {
		agentJSON
		Definition *agents.Definition `json:"definition"`
	}{agentRow(r), r.Definition}
	if a.json {
		return a.emit(out, nil)
	}
	fmt.Fprintf(a.stdout, "# %s, version %s, by %s at %s\n%s", r.Ref(), r.Version, r.By, fmtTime(utc(r.At)), r.Definition.YAML())
	return nil
}

func runAgentsHistory(a *app, args []string) error {
	if err := agents.CheckName(args[0]); err != nil {
		return a.usagef("%s", strings.TrimPrefix(err.Error(), "agents: "))
	}
	h, err := a.agents().History(a.ctx, args[0])
	if errors.Is(err, agents.ErrNotFound) {
		return fmt.Errorf("no agent %q", args[0])
	}
	if err != nil {
		return err
	}
	type rev struct {
		Revision int       `json:"revision"`
		Version  string    `json:"version,omitempty"`
		Action   string    `json:"action"`
		By       string    `json:"by"`
		At       time.Time `json:"at"`
	}
	out := struct {
		Agent     string `json:"agent"`
		Revisions []rev  `json:"revisions"`
	}{Agent: args[0]}
	for _, r := range h {
		action := "applied"
		if r.Deleted {
			action = "deleted"
		}
		out.Revisions = append(out.Revisions, rev{r.Revision, r.Version, action, r.By, utc(r.At)})
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "REVISION", "VERSION", "ACTION", "BY", "AT")
		for _, r := range out.Revisions {
			row(w, r.Revision, short(r.Version), r.Action, r.By, fmtTime(r.At))
		}
	})
}

func runAgentsDiff(a *app, args []string) error {
	var from, to *agents.Record
	var err error
	switch {
	case len(args) == 2:
		if from, err = a.resolveAgent(args[0]); err != nil {
			return err
		}
		if to, err = a.resolveAgent(args[1]); err != nil {
			return err
		}
	case strings.Contains(args[0], "@"):
		if from, err = a.resolveAgent(args[0]); err != nil {
			return err
		}
		name, _, _ := strings.Cut(args[0], "@")
		if to, err = a.resolveAgent(name); err != nil {
			return err
		}
	default:
		if to, err = a.resolveAgent(args[0]); err != nil {
			return err
		}
		h, err := a.agents().History(a.ctx, args[0])
		if err != nil {
			return err
		}
		for i := len(h) - 1; i >= 0; i-- {
			if r := h[i]; !r.Deleted && r.Revision < to.Revision {
				from = r
				break
			}
		}
		if from == nil {
			return fmt.Errorf("agent %q has one revision: nothing to compare it with", args[0])
		}
	}
	lines := diffLines(from.Definition.YAML(), to.Definition.YAML())
	out := struct {
		From  string   `json:"from"`
		To    string   `json:"to"`
		Lines []string `json:"lines"`
	}{from.Ref(), to.Ref(), lines}
	if a.json {
		return a.emit(out, nil)
	}
	fmt.Fprintf(a.stdout, "--- %s (version %s)\n+++ %s (version %s)\n", from.Ref(), short(from.Version), to.Ref(), short(to.Version))
	if len(lines) == 0 {
		fmt.Fprintln(a.stdout, "(the same definition)")
	}
	for _, l := range lines {
		fmt.Fprintln(a.stdout, l)
	}
	return nil
}

// diffLines lists the lines of a missing from b ("-") and of b missing
// from a ("+"), in order, by their longest common subsequence: definitions
// are small, so the quadratic table is too.
func diffLines(a, b string) []string {
	x, y := strings.Split(strings.TrimSuffix(a, "\n"), "\n"), strings.Split(strings.TrimSuffix(b, "\n"), "\n")
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, "+"+y[j])
			j++
		default:
			out = append(out, "-"+x[i])
			i++
		}
	}
	return out
}

func runAgentsDelete(a *app, args []string) error {
	if err := agents.CheckName(args[0]); err != nil {
		return a.usagef("%s", strings.TrimPrefix(err.Error(), "agents: "))
	}
	r, err := a.agents().Delete(a.ctx, args[0], max(a.agent.ifRevision, 0))
	if errors.Is(err, agents.ErrNotFound) {
		return fmt.Errorf("no agent %q", args[0])
	}
	if err != nil {
		return err
	}
	out := struct {
		Agent    string `json:"agent"`
		Revision int    `json:"revision"`
	}{args[0], r.Revision}
	return a.emit(out, func(w io.Writer) {
		row(w, out.Agent, "deleted", fmt.Sprintf("revision %d", out.Revision))
	})
}
