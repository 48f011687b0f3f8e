package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// watchLine is one line of watch --json.
type watchLine struct {
	Seq   uint64     `json:"seq"`
	Event live.Event `json:"event"`
}

// follower runs lash-admin watch --json and reads its lines.
type follower struct {
	cmd   *exec.Cmd
	lines chan watchLine
}

func (a *admin) watch(args ...string) *follower {
	a.t.Helper()
	cmd := exec.Command(a.bin, append([]string{"--nats", a.url, "--cache", a.cache, "watch", "--json"}, args...)...)
	cmd.Env = append(cleanEnv(a.t), a.env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		a.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	f := &follower{cmd: cmd, lines: make(chan watchLine, 1024)}
	go func() {
		defer close(f.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l watchLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l.Event.Type, l.Event.Error = "bad line", sc.Text()
			}
			f.lines <- l
		}
	}()
	a.t.Cleanup(f.stop)
	return f
}

// until reads lines until the n-th commit.
func (f *follower) until(t *testing.T, n int) []watchLine {
	t.Helper()
	var got []watchLine
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-f.lines:
			if !ok {
				t.Fatalf("watch ended; read %+v", got)
			}
			if l.Event.Type == "bad line" {
				t.Fatalf("watch printed %q", l.Event.Error)
			}
			got = append(got, l)
			if l.Event.Type == live.TypeTurnCommitted {
				if n--; n == 0 {
					return got
				}
			}
		case <-deadline:
			t.Fatalf("commits missing in %+v", got)
		}
	}
}

func (f *follower) stop() {
	if f.cmd.ProcessState == nil {
		_ = f.cmd.Process.Kill()
		_ = f.cmd.Wait()
	}
}

// servingNode runs node-a on srv with a scripted model, serving inputs
// until the test ends.
func servingNode(t *testing.T, srv *testenv.Server, script string, reg *tools.Registry) *lash.Node {
	ctx := context.Background()
	n, err := lash.Open(ctx, lash.WithConn(srv.Conn(t)), lash.WithNodeID("node-a"),
		lash.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		lash.WithModel(scripted.NewModel(scripted.MustParse(script))), lash.WithTools(reg),
		lash.WithMachine(turn.Config{Model: "scripted", System: system}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	sctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { n.Serve(sctx); close(served) }()
	t.Cleanup(func() { stop(); <-served })
	return n
}

// send --wait prints the answer of the turn that consumes the input; watch
// follows a session's events, and one started again after the last
// sequence it printed prints every event it missed, once, in order; both
// binaries tell their version.
func TestWatchAndSendWait(t *testing.T) {
	srv := testenv.RunJetStream(t)
	servingNode(t, srv, script, registry(t))
	a := &admin{t: t, bin: buildAdmin(t, t.TempDir()), url: srv.URL(), cache: t.TempDir()}

	if out := a.ok("--version"); !strings.HasPrefix(out, "lash-admin ") {
		t.Fatalf("--version: %q", out)
	}
	first := a.watch("s1")
	var ans answerJSON
	a.json(&ans, "send", "s1", "weather in Oslo?", "--wait")
	if ans.Turn != "in-1" || ans.Status != "done" || ans.Termination != "natural-end" || ans.Answer != "Done." {
		t.Fatalf("send --wait: %+v", ans)
	}
	seen := first.until(t, 1)
	first.stop()
	human := a.ok("send", "s1", "weather in Oslo again?", "--wait")
	if strings.TrimSpace(human) != "Done." {
		t.Fatalf("send --wait printed %q", human)
	}
	back := a.watch("s1", "--from", fmt.Sprint(seen[len(seen)-1].Seq))
	after := back.until(t, 1)
	all := a.watch("s1").until(t, 2)
	var joined, full []uint64
	for _, l := range append(seen, after...) {
		joined = append(joined, l.Seq)
	}
	for _, l := range all {
		full = append(full, l.Seq)
	}
	if fmt.Sprint(joined) != fmt.Sprint(full) || after[0].Seq <= seen[len(seen)-1].Seq {
		t.Fatalf("watch before and after a break:\n%v\nwant\n%v", joined, full)
	}

	// transcript --follow: the committed conversation, then the next
	// turn's messages as they come, each once.
	cmd := exec.Command(a.bin, "--nats", a.url, "--cache", a.cache, "transcript", "s1", "--follow", "--json")
	cmd.Env = cleanEnv(t)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	msgs := make(chan messageJSON, 64)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m messageJSON
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				msgs <- m
			}
		}
	}()
	a.json(&ans, "send", "s1", "weather in Oslo, once more?", "--wait")
	var got []string
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("transcript --follow ended: %q", got)
			}
			got = append(got, fmt.Sprintf("%d %s %s %s", m.Index, m.Turn, m.Role, m.Text))
			done = m.Turn == ans.Turn && m.Role == "assistant" && m.Text == "Done."
		case <-deadline:
			t.Fatalf("transcript --follow printed %q", got)
		}
	}
	joinedText := strings.Join(got, "\n")
	if strings.Count(joinedText, "user weather in Oslo, once more?") != 1 || strings.Count(joinedText, "0 in-1 user weather in Oslo?") != 1 {
		t.Fatalf("transcript --follow printed:\n%s", joinedText)
	}
}
