package streams_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
)

// The embedded server keeps acknowledged writes across a restart on the
// same directory, and fsyncs before acknowledging by default.
func TestEmbeddedServerKeepsWritesAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	start := func(listen string) (*streams.Embedded, *streams.Client) {
		t.Helper()
		e, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: dir, Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		if !e.Server().JetStreamConfig().SyncAlways {
			t.Error("embedded server does not fsync before acknowledging")
		}
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := streams.Open(ctx, nc, streams.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return e, c
	}
	e, c := start("none")
	if e.ClientURL() != "" {
		t.Errorf("listener %q with Listen none", e.ClientURL())
	}
	subj, _ := c.Subjects().SessionEvents("kept")
	seq, _, err := c.Append(ctx, streams.Publication{Subject: subj, Data: []byte("before restart")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.Shutdown()

	e, c = start("127.0.0.1:-1")
	defer e.Shutdown()
	head, err := c.Head(ctx, subj)
	if err != nil || head.Seq != seq || string(head.Data) != "before restart" {
		t.Fatalf("after restart: %+v %v", head, err)
	}
	// Other programs reach it over TCP on loopback.
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatalf("connect to %s: %v", e.ClientURL(), err)
	}
	nc.Close()
}

func TestEmbeddedConfigErrors(t *testing.T) {
	if _, err := streams.StartEmbedded(streams.EmbeddedConfig{}); err == nil {
		t.Error("no store directory accepted")
	}
	if _, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: t.TempDir(), Listen: "nonsense"}); err == nil {
		t.Error("bad listen address accepted")
	}
}

// A store directory the server cannot create ends the start at once, with
// the server's reason, instead of waiting out the ready timeout; the
// reason reaches the logger too.
func TestEmbeddedUnusableStoreFailsFast(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	began := time.Now()
	e, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: filepath.Join(file, "nats"), Listen: "127.0.0.1:-1",
		ReadyTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		e.Shutdown()
		t.Fatal("a store directory under a regular file was accepted")
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Errorf("failed after %s: not at once", took)
	}
	if msg := err.Error(); !strings.Contains(msg, "JetStream") || !strings.Contains(msg, "not a directory") || strings.Contains(msg, "not ready") {
		t.Errorf("error %q does not say why", msg)
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "not a directory") {
		t.Errorf("the logger did not get the fatal error:\n%s", out)
	}
}

// The server's warnings reach the logger: a stream directory without its
// metadata file is one.
func TestEmbeddedLogsWarnings(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "jetstream", "$G", "streams", "BROKEN")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	e, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: dir, Listen: "none",
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["level"] == "WARN" && m["component"] == "nats-server" &&
			strings.HasPrefix(fmt.Sprint(m["msg"]), "Missing stream metafile") && strings.Contains(fmt.Sprint(m["msg"]), "BROKEN") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning about the broken stream:\n%s", logs.String())
	}
	// Notices are at debug, below the handler's level.
	if strings.Contains(logs.String(), `"level":"INFO"`) || strings.Contains(logs.String(), `"level":"DEBUG"`) {
		t.Errorf("notices logged above debug or at a level the handler leaves out:\n%s", logs.String())
	}
}

// A client port in use ends the start at once too.
func TestEmbeddedPortInUseFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: t.TempDir(), Listen: l.Addr().String(), ReadyTimeout: time.Minute})
	if err == nil {
		e.Shutdown()
		t.Fatalf("started on %s, a port in use", l.Addr())
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %q does not say why", err)
	}
}
