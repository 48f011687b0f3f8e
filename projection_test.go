package lash

import (
	"strings"
	"testing"

	"github.com/lash-run/lash/streams"
)

// Inputs and signals that cannot be read are set aside in the read models'
// quarantines, with the reason, and the good ones are folded.
func TestProjectionQuarantines(t *testing.T) {
	r := newRig(t)
	n := r.node("one")
	c := n.Streams()
	for _, p := range []streams.Publication{
		{Subject: "lash.sess.s1.in", Data: []byte(`{"text":"hello"}`)},
		{Subject: "lash.sess.s1.in", Data: []byte(`{"nope":1}`)},
		{Subject: "lash.sess.s2.in", Data: []byte(`not json`)},
		{Subject: "lash.signal.a", Data: []byte(`{"ok":true}`)},
		{Subject: "lash.signal.b", Data: []byte(`{"cut":`)},
	} {
		if _, _, err := c.Publish(r.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	sessions, err := OpenProjection(t.TempDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer sessions.Close()
	signals, err := OpenSignalProjection(t.TempDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer signals.Close()
	if err := sessions.CatchUp(r.ctx); err != nil {
		t.Fatal(err)
	}
	if err := signals.CatchUp(r.ctx); err != nil {
		t.Fatal(err)
	}
	q, err := sessions.Quarantine()
	if err != nil || len(q) != 2 || q[0].Subject != "lash.sess.s1.in" || !strings.Contains(q[0].Reason, `unknown field "nope"`) ||
		q[1].Subject != "lash.sess.s2.in" || string(q[1].Data) != "not json" {
		t.Fatalf("sessions quarantine %+v, %v", q, err)
	}
	if h, err := sessions.Session("s1"); err != nil || h.Inputs != 1 || h.PendingInputs != 1 {
		t.Fatalf("head %+v, %v", h, err)
	}
	q, err = signals.Quarantine()
	if err != nil || len(q) != 1 || q[0].Subject != "lash.signal.b" || !strings.Contains(q[0].Reason, "must be JSON") {
		t.Fatalf("signals quarantine %+v, %v", q, err)
	}
}
