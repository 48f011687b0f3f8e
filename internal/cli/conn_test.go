package cli

import (
	"os"
	"path/filepath"
	"strings"
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

// A connect error names the URL without its secrets: lash-node logs it and
// lash-admin prints it.
func TestConnectErrorHidesSecrets(t *testing.T) {
	c := Conn{URL: "nats://lash:hunter2@127.0.0.1:1, nats://s3cr3t-token@127.0.0.1:2,nats://127.0.0.1:3"}
	_, err := c.Connect("test", "")
	if err == nil {
		t.Fatal("connected to nothing")
	}
	msg := err.Error()
	for _, secret := range []string{"hunter2", "s3cr3t-token"} {
		if strings.Contains(msg, secret) {
			t.Fatalf("the error shows a secret: %s", msg)
		}
	}
	if !strings.Contains(msg, "nats://lash:xxxxx@127.0.0.1:1") || !strings.Contains(msg, "nats://127.0.0.1:3") {
		t.Fatalf("the error does not name the servers: %s", msg)
	}
	if got := Redact("nats://%zz@host"); strings.Contains(got, "%zz") {
		t.Fatalf("an unparsed URL shown: %s", got)
	}
}
