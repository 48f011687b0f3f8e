package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/triggers"
)

// Deleting a session: its grants are revoked (the processes go on), its
// subjects purged, read models drop it, a node that kept its state starts
// it anew, and a session another holder runs is refused.
func TestAdminSessionsDelete(t *testing.T) {
	srv := testenv.RunJetStream(t)
	node, c := seed(t, srv)
	ctx := context.Background()
	a := &admin{t: t, bin: buildAdmin(t, t.TempDir()), url: srv.URL(), cache: filepath.Join(t.TempDir(), "cache")}
	r := processes.New(c, "node-a")
	ext := func(wake string) processes.Registration {
		return processes.Registration{Input: processes.Input{Kind: processes.External, ExternalRef: "job"},
			Disposition: processes.ExternallyOwned, Provenance: processes.Provenance{Session: "s1"}, WakeTarget: wake}
	}
	for id, reg := range map[string]processes.Registration{"p-only": ext(""), "p-shared": ext("s2")} {
		if _, _, err := r.Register(ctx, id, reg); err != nil {
			t.Fatal(err)
		}
	}

	trig := triggers.New(c, "node-a")
	for _, o := range []triggers.Owner{{Kind: triggers.Session, ID: "s1"}, {Kind: triggers.Session, ID: "s2"}} {
		spec := &triggers.Spec{SourceType: "mail", Start: triggers.Target{Kind: processes.ToolCall, Tool: "sort"}}
		if _, err := trig.Apply(ctx, triggers.Op{ID: "reg-" + o.ID, Action: triggers.ActRegister, Owner: o, Key: "inbox", Spec: spec}, &o); err != nil {
			t.Fatal(err)
		}
	}

	var out deleteJSON
	a.json(&out, "sessions", "delete", "s1")
	s1sub := triggers.SubscriptionID(triggers.Owner{Kind: triggers.Session, ID: "s1"}, "inbox")
	if len(out.Revoked) != 2 || len(out.Orphaned) != 1 || out.Orphaned[0] != "p-only" || len(out.Purged) != 9 ||
		len(out.Subscriptions) != 1 || out.Subscriptions[0] != s1sub {
		t.Fatalf("delete: %+v", out)
	}
	if sub, err := trig.Get(ctx, s1sub, nil); err != nil || !sub.Deleted {
		t.Fatalf("s1's subscription after the delete: %+v, %v", sub, err)
	}
	if sub, err := trig.Get(ctx, triggers.SubscriptionID(triggers.Owner{Kind: triggers.Session, ID: "s2"}, "inbox"), nil); err != nil || sub.Deleted {
		t.Fatalf("s2's subscription after s1's delete: %+v, %v", sub, err)
	}
	for _, id := range []string{"p-only", "p-shared"} {
		p, err := r.Get(ctx, id)
		if err != nil || p.Ended() || p.Granted("s1") {
			t.Fatalf("%s after the delete: %+v, %v; want it open, s1's grant gone", id, p, err)
		}
	}
	for _, subj := range []string{"lash.sess.s1.ev", "lash.sess.s1.in"} {
		if _, err := c.Head(ctx, subj); !errors.Is(err, streams.ErrNotFound) {
			t.Fatalf("%s after the delete: %v", subj, err)
		}
	}
	if _, err := c.NextOnSubject(ctx, "lash.fx.s1.>", 1); !errors.Is(err, streams.ErrNotFound) {
		t.Fatalf("s1's journal after the delete: %v", err)
	}
	var sessions sessionsJSON
	a.json(&sessions, "sessions", "ls")
	if len(sessions.Sessions) != 1 || sessions.Sessions[0].Session != "s2" {
		t.Fatalf("sessions after the delete: %+v", sessions.Sessions)
	}
	a.ok("rebuild")
	a.json(&sessions, "sessions", "ls")
	if len(sessions.Sessions) != 1 || sessions.Sessions[0].Session != "s2" {
		t.Fatalf("sessions after a rebuild: %+v", sessions.Sessions)
	}
	// The node that ran s1 kept its state; a new input starts it anew.
	s := node.Session("s1")
	if _, _, err := s.Send(ctx, "again", lash.Input{Text: "weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Run(ctx); err != nil || len(res) != 1 {
		t.Fatalf("a turn after the delete: %+v, %v", res, err)
	}
	tr, err := s.Transcript(ctx)
	if err != nil || len(tr) != 4 || tr[0].Text != "weather in Oslo?" {
		t.Fatalf("s1's transcript after the delete and one turn: %d messages, %v; want only the new turn", len(tr), err)
	}
	a.fails(1, `no session "s9"`, "sessions", "delete", "s9")
	busy := leases.New(c, leases.LocalOwner("busy-node"))
	if err := busy.Beat(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := busy.Claim(ctx, "sess.s2", time.Minute); err != nil {
		t.Fatal(err)
	}
	a.fails(1, "session s2 is running on node busy-node", "sessions", "delete", "s2")
	if _, err := c.Head(ctx, "lash.sess.s2.ev"); err != nil {
		t.Fatalf("a refused delete touched s2: %v", err)
	}
}
