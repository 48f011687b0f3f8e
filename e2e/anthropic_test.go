package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
)

// A node on Anthropic's Messages API (the test model server speaking it):
// a streamed answer reaches watchers as text_delta events; a 429 is
// retried after the Retry-After it carried; a 401 whose body echoes the
// key fails the turn and leaves the key nowhere: no stream, no node log,
// nothing lash-admin shows.
func TestAnthropicProvider(t *testing.T) {
	const key = "sk-ant-e2e-7f3a9c51"
	const story = "Once upon a time there was a durable agent that never lost its place."
	script := "rule busy\n  when user contains busy\n  fail 429 first 1 slow down\n  say recovered after the wait\n\n" +
		"rule denied\n  when user contains deny\n  fail 401 invalid x-api-key " + key + "\n\n" +
		"rule story\n  when user contains story\n  pace 20ms\n  say " + story + "\n\n" +
		"default\n  say ok\n"
	models := testenv.RunModelServer(t, scripted.MustParse(script))
	d := newDeployment(t)
	node := startEnv(t, "node-a", []string{"ANTHROPIC_API_KEY=" + key}, "lash-node", "--nats", d.url, "--node-id", "node-a",
		"--data", d.dir+"/node-a", "--http", "off", "--lease-ttl", "2s", "--log-format", "text",
		"--provider", "anthropic", "--base-url", models.AnthropicURL(), "--model", "claude-test", "--turn-attempts", "2")
	node.waitLine("lash-node running", 30*time.Second)
	d.waitNode("node-a")

	d.send("tale", "k1", []byte(`{"text":"tell me a story"}`))
	d.waitAnswer("tale", story)
	var deltas []string
	js, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(t.Context(), "LASH_LIVE", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"lash.live.tale"}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if s := string(m.Data()); strings.Contains(s, `"text_delta"`) {
			deltas = append(deltas, s)
		}
	}
	if len(deltas) < 2 {
		t.Fatalf("%d text_delta events for a streamed answer; want its pieces", len(deltas))
	}

	seq := d.send("busy", "k1", []byte(`{"text":"busy?"}`))
	d.waitAnswer("busy", "recovered after the wait")
	var ef effects
	d.admin(&ef, "effects", "busy", fmt.Sprintf("in-%d", seq))
	slept := false
	for _, e := range ef.Effects {
		if e.Kind == "sleep" {
			slept = true
		}
	}
	if !slept || models.Requests() < 3 {
		t.Fatalf("the 429 was not waited out and retried: %+v, %d requests", ef.Effects, models.Requests())
	}

	seq = d.send("deny", "k1", []byte(`{"text":"deny me"}`))
	testenv.WaitFor(t, 60*time.Second, func() error {
		var tt turns
		if err := d.tryAdmin(&tt, "turns", "deny"); err != nil {
			return err
		}
		if len(tt.Turns) != 1 || tt.Turns[0].Termination.Reason != "error" || tt.Turns[0].Termination.Code != "provider_error" {
			return fmt.Errorf("turns %+v", tt.Turns)
		}
		if !strings.Contains(tt.Turns[0].Termination.Detail+tt.Turns[0].Termination.Code, "authentication_error") {
			return fmt.Errorf("the failure does not say why: %+v", tt.Turns[0].Termination)
		}
		return nil
	})
	shown := []string{strings.Join(node.lines(), "\n")}
	for _, args := range [][]string{{"turns", "deny"}, {"transcript", "deny"}, {"effects", "deny", fmt.Sprintf("in-%d", seq)}, {"sessions", "show", "deny"}} {
		out, errOut, _ := run(t, "lash-admin", append([]string{"--nats", d.url, "--cache", d.dir + "/admin-cache"}, args...)...)
		shown = append(shown, out+errOut)
	}
	for _, out := range shown {
		if strings.Contains(out, key) {
			t.Fatalf("the key is in what lash shows: %s", out)
		}
	}
	if left := holding(t, js, key); len(left) > 0 {
		t.Fatalf("the key is stored: %v", left)
	}
}
