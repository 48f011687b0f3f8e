package e2e

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// inDir runs a command in dir with env added, to its end.
func inDir(t *testing.T, dir string, env []string, command string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary(t, command), args...)
	cmd.Dir, cmd.Env = dir, append(append(os.Environ(), "NATS_URL="), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// staleSeed leaves a user nkey seed the server does not know in dir's
// data directory, as a node that once ran with --embedded-auth nkey does.
func staleSeed(t *testing.T, dir string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	if err := os.MkdirAll(filepath.Join(dir, "lash-data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lash-data", "embedded-nkey.seed"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The embedded server with a password: a client without it is refused,
// the node and lash-admin on the same machine (same directory and
// settings) need no flag for it, even with the seed of an earlier nkey
// mode left there; a listener beyond loopback is refused without
// authentication and turns it on by default.
func TestEmbeddedServerAuth(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "node.script")
	if err := os.WriteFile(script, []byte("default\n  say hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	staleSeed(t, dir)
	port := freePort(t)
	env := []string{"LASH_LISTEN=127.0.0.1:" + port}
	cmd := exec.Command(binary(t, "lash-node"), "--script", script, "--http", "off", "--embedded-auth", "password")
	cmd.Dir = dir
	p := startCmd(t, "lash-node", env, cmd)
	p.waitLine("lash-node running", 30*time.Second)
	url := "nats://127.0.0.1:" + port

	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without the password connected")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a client without the password: %v; want an authorization error", err)
	}
	pw, err := os.ReadFile(filepath.Join(dir, "lash-data", "embedded-password"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "lash-data", "embedded-password")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the password file is %v, want 0600", fi.Mode().Perm())
	}
	nc, err := nats.Connect(url, nats.UserInfo("lash", strings.TrimSpace(string(pw))))
	if err != nil {
		t.Fatalf("the password from the data directory: %v", err)
	}
	nc.Close()
	if strings.Contains(strings.Join(p.lines(), "\n"), strings.TrimSpace(string(pw))) {
		t.Fatal("the node logged the password")
	}
	if out, errOut, code := inDir(t, dir, env, "lash-admin", "send", "s1", "hi"); code != 0 {
		t.Fatalf("lash-admin send on the same machine: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := inDir(t, dir, env, "lash-admin", "streams"); code != 0 || !strings.Contains(out, "LASH_SESSIONS") {
		t.Fatalf("lash-admin streams: exit %d\n%s%s", code, out, errOut)
	}
	// Elsewhere lash-admin is refused like any client without the password.
	if _, errOut, code := inDir(t, t.TempDir(), env, "lash-admin", "streams"); code != 1 || !strings.Contains(strings.ToLower(errOut), "authorization") {
		t.Fatalf("lash-admin without the data directory: exit %d %s", code, errOut)
	}

	// Beyond loopback: refused without authentication, on by default.
	other := t.TempDir()
	_, errOut, code := inDir(t, other, nil, "lash-node", "--script", script, "--http", "off", "--listen", "0.0.0.0:"+freePort(t), "--embedded-auth", "none")
	if code != 2 || !strings.Contains(errOut, "without authentication") {
		t.Fatalf("--listen 0.0.0.0 --embedded-auth none: exit %d %s", code, errOut)
	}
	wide := freePort(t)
	cmd = exec.Command(binary(t, "lash-node"), "--script", script, "--http", "off", "--listen", "0.0.0.0:"+wide)
	cmd.Dir = other
	q := startCmd(t, "lash-node wide", nil, cmd)
	q.waitLine("lash-node running", 30*time.Second)
	if q.count("listens beyond this host") == 0 {
		t.Fatal("no warning that the server listens beyond this host")
	}
	if nc, err := nats.Connect("nats://127.0.0.1:" + wide); err == nil {
		nc.Close()
		t.Fatal("a client without the password connected to a server listening on every interface")
	}
}

// The embedded server with an nkey: a client without the seed is refused,
// one with the seed from the data directory connects (the seed never
// crosses the wire, and the node does not log it), lash-admin on the same
// machine needs no flag, elsewhere it is refused.
func TestEmbeddedServerNkey(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "node.script")
	if err := os.WriteFile(script, []byte("default\n  say hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	env := []string{"LASH_LISTEN=127.0.0.1:" + port}
	cmd := exec.Command(binary(t, "lash-node"), "--script", script, "--http", "off", "--embedded-auth", "nkey")
	cmd.Dir = dir
	p := startCmd(t, "lash-node", env, cmd)
	p.waitLine("lash-node running", 30*time.Second)
	url := "nats://127.0.0.1:" + port
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without the seed connected")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a client without the seed: %v; want an authorization error", err)
	}
	path := filepath.Join(dir, "lash-data", "embedded-nkey.seed")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the seed file: %v, %v; want it 0600", fi, err)
	}
	seed, _ := os.ReadFile(path)
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opt)
	if err != nil {
		t.Fatalf("the seed from the data directory: %v", err)
	}
	nc.Close()
	if strings.Contains(strings.Join(p.lines(), "\n"), strings.TrimSpace(string(seed))) {
		t.Fatal("the node logged the seed")
	}
	if out, errOut, code := inDir(t, dir, env, "lash-admin", "send", "s1", "hi"); code != 0 {
		t.Fatalf("lash-admin send on the same machine: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := inDir(t, t.TempDir(), env, "lash-admin", "streams"); code != 1 || !strings.Contains(strings.ToLower(errOut), "authorization") {
		t.Fatalf("lash-admin without the data directory: exit %d %s", code, errOut)
	}
}
