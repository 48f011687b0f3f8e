package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/triggers"
)

// The triggers commands: register, list, change and inspect
// subscriptions, and see the occurrences and deliveries of a signal.
func TestAdminTriggers(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a := &admin{t: t, bin: buildAdmin(t, t.TempDir()), url: srv.URL(), cache: filepath.Join(t.TempDir(), "cache")}

	var r triggers.Receipt
	a.json(&r, "triggers", "register", "deploys", "--source", "deploy.>", "--tool", "notify", "--args", `{"channel":"#ops"}`, "--wake", "ops", "--op", "op-1")
	if !r.Changed || r.Revision != 1 || r.Subscription != triggers.SubscriptionID(triggers.Owner{Kind: triggers.Host}, "deploys") {
		t.Fatalf("register: %+v", r)
	}
	var again triggers.Receipt
	a.json(&again, "triggers", "register", "deploys", "--source", "deploy.>", "--tool", "notify", "--args", `{"channel":"#ops"}`, "--wake", "ops", "--op", "op-1")
	if again != r {
		t.Fatalf("the same operation again = %+v, want %+v", again, r)
	}
	a.fails(1, "conflict", "triggers", "register", "deploys", "--source", "deploy.42", "--tool", "notify")
	a.fails(2, "give --tool or --agent", "triggers", "register", "x", "--source", "deploy")
	a.fails(2, "source key", "triggers", "register", "x", "--source", "deploy.>.x", "--tool", "notify")
	a.fails(2, "--owner", "triggers", "ls", "--owner", "nobody")
	a.json(&r, "triggers", "register", "mail", "--source", "mail.*", "--agent", "Sort the mail.", "--owner", "session:s1")

	var ls struct {
		Subscriptions []subscriptionJSON `json:"subscriptions"`
	}
	a.json(&ls, "triggers", "ls")
	if len(ls.Subscriptions) != 2 {
		t.Fatalf("ls: %+v", ls.Subscriptions)
	}
	a.json(&ls, "triggers", "ls", "--owner", "session:s1")
	if len(ls.Subscriptions) != 1 || ls.Subscriptions[0].Source != "mail.*" || ls.Subscriptions[0].Start != "agent" {
		t.Fatalf("ls --owner session:s1: %+v", ls.Subscriptions)
	}
	sub := triggers.SubscriptionID(triggers.Owner{Kind: triggers.Host}, "deploys")
	a.fails(1, "not found: subscription", "triggers", "disable", sub, "--owner", "session:s1")
	a.fails(1, "stale", "triggers", "disable", sub, "--revision", "5")
	for _, act := range []string{"disable", "delete", "revive"} {
		a.json(&r, "triggers", act, sub)
	}
	var show struct {
		subscriptionJSON
		Spec    triggers.Spec           `json:"spec"`
		History []triggers.Subscription `json:"history"`
	}
	a.json(&show, "triggers", "show", sub)
	if show.State != "enabled" || show.Incarnation != 2 || len(show.History) != 4 || show.History[2].Action != "delete" {
		t.Fatalf("show: %+v", show)
	}
	if out := a.ok("triggers", "show", sub); !strings.Contains(out, "revive") || !strings.Contains(out, "deploy.>") {
		t.Fatalf("show, as a table:\n%s", out)
	}

	// A signal, delivered by a router as a node does.
	router := triggers.NewRouter(triggers.RouterConfig{Triggers: triggers.New(c, "node-a"), Registry: processes.New(c, "node-a"), Store: c})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go router.Run(rctx)
	seq, _, err := c.Publish(ctx, streams.Publication{Subject: "lash.signal.deploy.7", Data: []byte(`{"ok":true}`), MsgID: "d-7"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.NextOnSubject(ctx, "lash.signal.deploy.7", seq)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := router.Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	var occs struct {
		Occurrences []triggers.Occurrence `json:"occurrences"`
	}
	a.json(&occs, "triggers", "occurrences")
	if len(occs.Occurrences) != 1 || occs.Occurrences[0].IdempotencyKey != "d-7" || len(occs.Occurrences[0].Deliveries) != 1 {
		t.Fatalf("occurrences: %+v", occs)
	}
	var ds struct {
		Deliveries []deliveryJSON `json:"deliveries"`
	}
	a.json(&ds, "triggers", "deliveries")
	if len(ds.Deliveries) != 1 || !ds.Deliveries[0].Started || ds.Deliveries[0].Incarnation != 2 {
		t.Fatalf("deliveries: %+v", ds)
	}
	a.json(&ds, "triggers", "deliveries", "--open")
	if len(ds.Deliveries) != 0 {
		t.Fatalf("open deliveries: %+v", ds)
	}

	// Schedules.
	a.fails(2, "--every", "triggers", "schedule", "beat")
	a.fails(2, "at least 1s", "triggers", "schedule", "beat", "--every", "10ms")
	a.ok("triggers", "schedule", "beat", "--every", "1h")
	a.ok("triggers", "schedule", "nightly", "--cron", "0 0 3 * * *")
	var ss struct {
		Schedules []triggers.Schedule `json:"schedules"`
	}
	a.json(&ss, "triggers", "schedules")
	if len(ss.Schedules) != 2 || ss.Schedules[0].Name != "beat" || ss.Schedules[0].Pattern != "@every 1h" || ss.Schedules[1].Pattern != "0 0 3 * * *" {
		t.Fatalf("schedules: %+v", ss)
	}
	a.ok("triggers", "unschedule", "beat")
	a.json(&ss, "triggers", "schedules")
	if len(ss.Schedules) != 1 || ss.Schedules[0].Name != "nightly" {
		t.Fatalf("schedules after unschedule: %+v", ss)
	}
}
