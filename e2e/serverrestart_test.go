package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
)

// A standalone nats-server under a running node is killed and started
// again: its memory stream LASH_LIVE is gone. The node makes it again, so
// live events and every lash-admin command work again within seconds,
// and the node is never restarted.
func TestServerRestartUnderNode(t *testing.T) {
	srv := testenv.RunJetStream(t)
	// Over TCP, as every client outside the server's process: it
	// reconnects once the server is back.
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d := &deployment{t: t, url: srv.URL(), nc: nc, dir: t.TempDir()}
	node := d.node("n1", "default\n  say hello\n")
	d.send("s1", "k1", []byte(`{"text":"hi"}`))
	d.waitAnswer("s1", "hello")

	srv.Restart()
	restarted := time.Now()
	reads := [][]string{{"streams"}, {"sessions", "ls"}, {"sessions", "show", "s1"}, {"transcript", "s1"}, {"turns", "s1"},
		{"nodes", "ls"}, {"leases", "ls"}, {"quarantine", "ls"}, {"processes", "ls"}, {"triggers", "ls"}, {"waits", "ls"}}
	testenv.WaitFor(t, 30*time.Second, func() error {
		for _, args := range reads {
			if err := d.tryAdmin(&struct{}{}, args...); err != nil {
				return err
			}
		}
		var st struct {
			Streams []struct {
				Name    string `json:"name"`
				Missing bool   `json:"missing"`
			} `json:"streams"`
		}
		if err := d.tryAdmin(&st, "streams"); err != nil {
			return err
		}
		for _, s := range st.Streams {
			if s.Missing {
				return fmt.Errorf("stream %s is still missing", s.Name)
			}
		}
		return nil
	})
	t.Logf("every read command worked again %s after the restart", time.Since(restarted).Round(10*time.Millisecond))
	// A turn after the restart: its live events are kept again, and a
	// client reads them through the node API; lash-admin send --wait
	// follows them to the answer.
	var sent struct {
		Answer string `json:"answer"`
	}
	d.admin(&sent, "send", "s1", "again", "--wait")
	if sent.Answer != "hello" {
		t.Fatalf("send --wait after the restart: %+v", sent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	page, err := nodeapi.NewClient(d.nc, "").Live(ctx, "s1", 0, 0)
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("live events after the restart: %+v, %v", page, err)
	}
	if !strings.Contains(strings.Join(node.lines(), "\n"), "made it again") {
		t.Fatal("the node did not say it made the LIVE stream again")
	}
	if node.count("lash-node running") != 1 {
		t.Fatal("the node restarted")
	}
}
