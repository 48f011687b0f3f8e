package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

// The processes commands against processes written by the registry: one
// ended by its runner, one external with a live cancel, one held.
func TestAdminProcesses(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := processes.New(c, "node-a")
	build := processes.Registration{Input: processes.Input{Kind: processes.ToolCall, Tool: "build", Args: json.RawMessage(`{"target":"all"}`)},
		Disposition: processes.Rerunnable, Provenance: processes.Provenance{Session: "s1", Turn: "t1", Effect: 2, Call: "call_1"}, WakeTarget: "s1"}
	ext := processes.Registration{Input: processes.Input{Kind: processes.External, ExternalRef: "ci-job-7"},
		Disposition: processes.ExternallyOwned, Provenance: processes.Provenance{Host: "node-a"}}
	for id, reg := range map[string]processes.Registration{"p-build": build, "p-ext": ext} {
		if _, _, err := r.Register(ctx, id, reg); err != nil {
			t.Fatal(err)
		}
	}
	run, err := r.Start(ctx, "p-build", leases.LocalOwner("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	l := run.Token()
	if _, err := run.Complete(ctx, json.RawMessage(`"built all"`)); err != nil {
		t.Fatal(err)
	}
	a := &admin{t: t, bin: buildAdmin(t, t.TempDir()), url: srv.URL(), cache: filepath.Join(t.TempDir(), "cache")}

	var ls struct {
		Processes []processJSON `json:"processes"`
	}
	a.json(&ls, "processes", "ls")
	if len(ls.Processes) != 2 || ls.Processes[0].ID != "p-build" && ls.Processes[1].ID != "p-build" {
		t.Fatalf("processes %+v", ls.Processes)
	}
	a.json(&ls, "processes", "ls", "--status", "open")
	if len(ls.Processes) != 1 || ls.Processes[0].ID != "p-ext" || ls.Processes[0].Status != "pending" || ls.Processes[0].What != "ci-job-7" {
		t.Fatalf("open processes %+v", ls.Processes)
	}
	a.json(&ls, "processes", "ls", "--session", "s1")
	if len(ls.Processes) != 1 || ls.Processes[0].Status != "completed" || ls.Processes[0].Attempts != 1 || ls.Processes[0].What != "build" {
		t.Fatalf("processes of s1 %+v", ls.Processes)
	}
	contains(t, a.ok("processes", "ls"), "p-build", "completed", "rerunnable", "tool_call", "p-ext", "externally_owned")

	var show processShowJSON
	a.json(&show, "processes", "show", "p-build")
	if show.End == nil || string(show.End.Data) != `"built all"` || show.LastStart == nil || show.LastStart.Token != l || show.Runner != nil {
		t.Fatalf("show %+v", show)
	}
	contains(t, a.ok("processes", "show", "p-build"), "outcome", "completed", "built all", "node-a")

	var evs struct {
		Events []processes.Event `json:"events"`
	}
	a.json(&evs, "processes", "events", "p-build")
	if len(evs.Events) != 3 || evs.Events[2].Type != "completed" || evs.Events[1].Token != l {
		t.Fatalf("events %+v", evs.Events)
	}

	contains(t, a.ok("processes", "cancel", "p-ext", "--reason", "job withdrawn"), "cancel_requested requested on process p-ext (event 2")
	contains(t, a.ok("processes", "abandon", "p-ext"), "abandon_requested requested on process p-ext (event 3")
	a.ok("processes", "cancel", "p-ext") // a second request changes nothing
	p, err := r.Get(ctx, "p-ext")
	if err != nil || p.Events != 3 || p.CancelRequested == nil || p.AbandonRequested == nil {
		t.Fatalf("after the requests: %+v, %v", p, err)
	}
	a.fails(1, "process p-build has ended", "processes", "cancel", "p-build")
	a.fails(1, `no process "nobody"`, "processes", "show", "nobody")
	a.fails(2, "--status", "processes", "ls", "--status", "bogus")
	if p, err := r.Get(ctx, "p-build"); err != nil || p.Events != 3 {
		t.Fatalf("a refused request changed the log: %+v, %v", p, err)
	}

	var grants struct {
		Process string   `json:"process"`
		Grants  []string `json:"grants"`
	}
	a.json(&grants, "processes", "grant", "p-build", "s2")
	if len(grants.Grants) != 2 || grants.Grants[1] != "s2" {
		t.Fatalf("after a grant: %+v", grants)
	}
	a.json(&grants, "processes", "revoke", "p-build", "s1")
	if len(grants.Grants) != 1 || grants.Grants[0] != "s2" {
		t.Fatalf("after a revoke: %+v", grants)
	}
	a.fails(1, "holds no grant", "processes", "grant", "p-build", "s3", "--from", "s9")
	contains(t, a.ok("processes", "prune", "--older-than", "1m"), "0 processes pruned")
	a.fails(2, "--older-than", "processes", "prune")
	if p, err := r.Get(ctx, "p-build"); err != nil || p.Events != 5 {
		t.Fatalf("after grants and a prune of nothing: %+v, %v", p, err)
	}
}
