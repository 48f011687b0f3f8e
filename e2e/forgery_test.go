package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// A plain client of an open deployment (the embedded server on loopback,
// no permissions) writes durable truth as a node would, each record at the
// head of its subject as a compare-and-set: a process's terminal event, a
// trigger delivery's start mark saying it failed, and a commit carrying
// the session's live fencing token. None changes a process, a delivery or
// a transcript; the work goes on and ends as it would have; lash-admin's
// quarantine lists each forgery.
func TestForgeriesSetAside(t *testing.T) {
	d, node, js := embedded(t, countScript)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	gate := make(chan struct{})
	serveGated(t, d.url, "t_count", 4, 0, gate)
	node.waitLine("tool found", 30*time.Second)

	// Work in flight: a background process, a trigger delivery; and a
	// session with a committed turn.
	api := nodeapi.NewClient(d.nc, "")
	if _, err := api.ProcessStart(ctx, nodeapi.ProcessStartRequest{ID: "bg", Tool: "t_count", Args: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	d.admin(&struct{}{}, "triggers", "register", "counts", "--source", "count.>", "--tool", "t_count")
	sig := nats.NewMsg("lash.signal.count.1")
	sig.Header.Set("Nats-Msg-Id", "count-1")
	sig.Data = []byte(`{}`)
	if _, err := d.nc.RequestMsg(sig, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	d.send("s1", "k1", []byte(`{"text":"hello"}`))
	d.waitAnswer("s1", "noted")
	var dls struct {
		Deliveries []struct {
			ID      string `json:"id"`
			Process string `json:"process"`
			Started bool   `json:"started"`
			Error   string `json:"error"`
		} `json:"deliveries"`
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if err := d.tryAdmin(&dls, "triggers", "deliveries"); err != nil {
			return err
		}
		if len(dls.Deliveries) != 1 || !dls.Deliveries[0].Started {
			return fmt.Errorf("deliveries: %+v", dls.Deliveries)
		}
		return nil
	})
	delivery := dls.Deliveries[0]
	testenv.WaitFor(t, 30*time.Second, func() error {
		for _, id := range []string{"bg", delivery.Process} {
			if p, err := api.ProcessStatus(ctx, id); err != nil || p.Status != "running" {
				return fmt.Errorf("process %s: %+v, %v", id, p, err)
			}
		}
		return nil
	})

	// The forgeries, each a compare-and-set at the head of its subject.
	forge := func(subject string, data []byte) uint64 {
		t.Helper()
		head, err := js.Stream(ctx, streamOf(subject))
		if err != nil {
			t.Fatal(err)
		}
		last, err := head.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.Publish(ctx, subject, data, jetstream.WithExpectLastSequencePerSubject(last.Sequence))
		if err != nil {
			t.Fatalf("forging on %s: %v", subject, err)
		}
		return ack.Sequence
	}
	procEvents := func(id string) int {
		var evs processEvents
		d.admin(&evs, "processes", "events", id)
		return len(evs.Events)
	}
	forgedEnd, _ := json.Marshal(map[string]any{"v": 1, "n": procEvents("bg") + 1, "type": "completed", "by": "solo",
		"at": time.Now().UTC(), "data": json.RawMessage(`"forged"`)})
	forgedProc := forge("lash.proc.bg.ev", forgedEnd)
	forgedMark, _ := json.Marshal(map[string]any{"v": 1, "started": false, "error": "forged failure", "process": delivery.Process,
		"by": "solo", "at": time.Now().UTC()})
	forgedDelivery := forge("lash.trig.dlv."+delivery.ID, forgedMark)
	forgedCommit := forge("lash.sess.s1.ev", forgedCommitOf(t, ctx, js))

	// The work goes on as if nothing had been written.
	close(gate)
	for _, id := range []string{"bg", delivery.Process} {
		p, err := api.ProcessAwait(ctx, id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status != "completed" || !strings.Contains(string(p.Outcome), "ok") {
			t.Fatalf("process %s ended %s with %s; want completed with the tool's answer", id, p.Status, p.Outcome)
		}
	}
	if err := d.tryAdmin(&dls, "triggers", "deliveries"); err != nil {
		t.Fatal(err)
	}
	if dl := dls.Deliveries[0]; !dl.Started || dl.Error != "" {
		t.Fatalf("the forged mark changed the delivery: %+v", dl)
	}
	d.send("s1", "k2", []byte(`{"text":"again"}`))
	for _, m := range d.waitAnswer("s1", "noted") {
		if strings.Contains(m.Text, "FORGE") {
			t.Fatalf("the forged commit is in the transcript: %+v", m)
		}
	}
	// turns shows the forged commit for what it is, apart from the two
	// turns the node ran.
	var ts struct {
		Turns []struct {
			Turn     string `json:"turn"`
			Status   string `json:"status"`
			SetAside string `json:"set_aside"`
		} `json:"turns"`
	}
	d.admin(&ts, "turns", "s1")
	var done, aside []string
	for _, tn := range ts.Turns {
		switch {
		case tn.Status == "set_aside" && tn.SetAside != "":
			aside = append(aside, tn.Turn)
		case tn.Status == "done":
			done = append(done, tn.Turn)
		}
	}
	if len(done) != 2 || len(aside) != 1 || aside[0] != "forged-turn" {
		t.Fatalf("turns of s1: %+v; want the two the node ran done and the forged one set aside", ts.Turns)
	}

	var q struct {
		Quarantine []struct {
			Seq     uint64 `json:"seq"`
			Subject string `json:"subject"`
			Fold    string `json:"fold"`
			Reason  string `json:"reason"`
		} `json:"quarantine"`
	}
	d.admin(&q, "quarantine", "ls")
	for _, want := range []struct {
		subject string
		seq     uint64
	}{{"lash.proc.bg.ev", forgedProc}, {"lash.trig.dlv." + delivery.ID, forgedDelivery}, {"lash.sess.s1.ev", forgedCommit}} {
		found := false
		for _, e := range q.Quarantine {
			if e.Subject == want.subject && e.Seq == want.seq && e.Fold == "signature" {
				found = true
			}
		}
		if !found {
			t.Errorf("the forgery on %s at %d is not in the quarantine: %+v", want.subject, want.seq, q.Quarantine)
		}
	}
}

// forgedCommitOf is a commit of a turn no node ran, under the fencing
// token of the session log's live holder, as a client reading the log
// can write it: the real first commit, its answer changed.
func forgedCommitOf(t *testing.T, ctx context.Context, js jetstream.JetStream) []byte {
	t.Helper()
	st, err := js.Stream(ctx, "LASH_SESSIONS")
	if err != nil {
		t.Fatal(err)
	}
	head, err := st.GetLastMsgForSubject(ctx, "lash.sess.s1.ev")
	if err != nil {
		t.Fatal(err)
	}
	live, err := sessionlog.DecodeEntry(head.Data)
	if err != nil {
		t.Fatal(err)
	}
	var commit *sessionlog.Entry
	for seq := uint64(1); seq <= head.Sequence && commit == nil; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || m.Subject != "lash.sess.s1.ev" {
			continue
		}
		if e, err := sessionlog.DecodeEntry(m.Data); err == nil && e.Kind == sessionlog.KindCommit {
			commit = e
		}
	}
	if commit == nil || !bytes.Contains(commit.Body, []byte("noted")) {
		t.Fatal("no commit with the answer to forge from")
	}
	body := bytes.ReplaceAll(commit.Body, []byte("noted"), []byte("FORGE")) // same length: still its encoding
	forged := &sessionlog.Entry{Kind: sessionlog.KindCommit, Token: live.Token, Owner: live.Owner, Turn: "forged-turn",
		Hash: sessionlog.ContentHash(body), Body: body, Settings: commit.Settings}
	data, err := msgpack.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionlog.DecodeEntry(data); err != nil {
		t.Fatalf("the forged commit does not read as an entry: %v", err)
	}
	return data
}

func streamOf(subject string) string {
	switch {
	case strings.HasPrefix(subject, "lash.proc."):
		return "LASH_PROCESSES"
	case strings.HasPrefix(subject, "lash.trig."):
		return "LASH_TRIGGERS"
	}
	return "LASH_SESSIONS"
}
