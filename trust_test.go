package lash

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
)

// A fence with a token no lease ever had, and a message that is no entry,
// published on a session's log by anyone who can publish there, neither
// block the session nor steer it: the next input runs as usual, on a
// node that kept the session's state and on one that did not.
func TestForgedFenceAndGarbageDoNotBlock(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	ctx := r.ctx
	s := n.Session("s1")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// A hostile client: a forged fence through the library, and garbage.
	hostile, err := streams.Open(ctx, r.conn(), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionlog.New(hostile).Fence(ctx, "s1", 999999, "mallory"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := hostile.Publish(ctx, streams.Publication{Subject: "lash.sess.s1.ev", Data: []byte("\xff\x00 not an entry")}); err != nil {
		t.Fatal(err)
	}
	for i, node := range []*Node{n, r.node("b")} {
		key := fmt.Sprintf("k%d", i+2)
		if _, _, err := s.Send(ctx, key, Input{Text: "And now?"}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		res, err := node.Session("s1").Run(rctx)
		cancel()
		if err != nil || len(res) != 1 {
			t.Fatalf("node %d: a turn after the forged fence: %+v, %v", i, res, err)
		}
	}
	tr, err := s.Transcript(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) < 3 || tr[len(tr)-1].Text != "Oslo is cold, Lima is grey, Pune is hot." {
		t.Fatalf("transcript %s", describeTranscript(tr))
	}
}
