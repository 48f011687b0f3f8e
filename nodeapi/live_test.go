package nodeapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/testenv"
)

// A session's live events read through the node API from a cursor: in
// order, in pages of the asked size, each marked when more follow; a
// limit out of bounds is a 400; a session with none reads as empty.
func TestLivePages(t *testing.T) {
	r := newAPIRig(t, "n1", nil)
	go r.node.Serve(r.ctx)
	if _, err := r.client.Submit(r.ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "deploy"}); err != nil {
		t.Fatal(err)
	}
	// The turn parks on the approval and commits: no event comes after.
	var all []nodeapi.LiveRecord
	testenv.WaitFor(t, 20*time.Second, func() error {
		page, err := r.client.Live(r.ctx, "s1", 0, nodeapi.MaxLiveLimit)
		if err != nil {
			return err
		}
		all = page.Records
		if n := len(all); n == 0 || !strings.Contains(string(all[n-1].Event), `"type":"turn_committed"`) {
			return fmt.Errorf("%d live events, the commit not last", n)
		}
		return nil
	})
	var paged []nodeapi.LiveRecord
	after := uint64(0)
	for {
		page, err := r.client.Live(r.ctx, "s1", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page.Records...)
		if !page.More {
			break
		}
		if len(page.Records) != 2 {
			t.Fatalf("a page of %d records with more to follow, asked for 2", len(page.Records))
		}
		after = page.Records[len(page.Records)-1].Seq
	}
	if len(paged) != len(all) {
		t.Fatalf("paged %d records, read %d at once", len(paged), len(all))
	}
	for i, rec := range all {
		var ev struct {
			Session string `json:"session"`
		}
		if rec.Seq != paged[i].Seq || json.Unmarshal(rec.Event, &ev) != nil || ev.Session != "s1" {
			t.Fatalf("record %d: %+v against %+v", i, rec, paged[i])
		}
		if i > 0 && rec.Seq <= all[i-1].Seq {
			t.Fatalf("records out of order: %d after %d", rec.Seq, all[i-1].Seq)
		}
	}
	if page, err := r.client.Live(r.ctx, "nobody", 0, 0); err != nil || len(page.Records) != 0 || page.More {
		t.Fatalf("a session without live events: %+v, %v", page, err)
	}
	var e *nodeapi.Error
	if _, err := r.client.Live(r.ctx, "s1", 0, nodeapi.MaxLiveLimit+1); !errors.As(err, &e) || e.Code != nodeapi.CodeBadRequest {
		t.Fatalf("a limit past the bound: %v", err)
	}
}

// A request whose answer would be published where lash's streams capture
// it (another session's inputs) is refused and answered nowhere: nothing
// lands on that subject, and the refusal is in info.
func TestReplyIntoAStreamRefused(t *testing.T) {
	r := newAPIRig(t, "n1", nil)
	nc := r.srv.Conn(t)
	ins, err := nc.SubscribeSync("lash.sess.victim.in")
	if err != nil {
		t.Fatal(err)
	}
	before := r.lastSeqs()
	for _, subj := range []string{"lash.api.status", "lash.api.sess.s1.status"} {
		if err := nc.PublishRequest(subj, "lash.sess.victim.in", []byte(`{"session":"s1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		if n := r.reqs.count("status 400"); n != 2 {
			return fmt.Errorf("%d status requests refused", n)
		}
		return nil
	})
	if m, err := ins.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("an answer landed in the victim's inputs: %s", m.Data)
	}
	if after := r.lastSeqs(); after != before {
		t.Fatalf("streams moved: %v to %v", before, after)
	}
	info, err := r.client.Info(r.ctx)
	if err != nil || len(info.Refused) == 0 || !strings.Contains(info.Refused[len(info.Refused)-1].Reason, "reply subject lash.sess.victim.in") {
		t.Fatalf("info's refusals: %+v, %v", info, err)
	}
}
