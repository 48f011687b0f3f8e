package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// --creds takes a bare nkey seed file as well as a credentials file: a
// server that knows the nkey admits it, and refuses a client without it.
func TestCredsTakesNkeySeed(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	srv := testenv.RunJetStream(t, testenv.WithOptions(func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	}))
	path := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Conn{URL: srv.URL(), Creds: path, Prefix: "lash", Replicas: 1}
	nc, err := c.Connect("test", "")
	if err != nil {
		t.Fatalf("with the seed: %v", err)
	}
	nc.Close()
	if nc, err := (&Conn{URL: srv.URL()}).Connect("test", ""); err == nil {
		nc.Close()
		t.Fatal("a client without the seed connected")
	}
}
