package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/lash-run/lash/turn"
)

// The program's claim, tested on the built binary: a call retried with the
// same idempotency key, in doubt, appends once; a SIGTERM drains and exits
// cleanly.
func TestToolServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts a process")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the program with")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool-server")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	s := testenv.RunJetStream(t)
	ledgerPath := filepath.Join(dir, "ledger.jsonl")
	cmd := exec.Command(bin, "--nats", s.URL(), "--journal", ledgerPath, "--delay", "20ms")
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error // set before exited is closed
	var lines lockedLines
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines.add(sc.Text())
		}
		exitErr = cmd.Wait() // after stdout is read to its end, as Wait requires
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	nc := s.Conn(t)
	var tool tools.Tool
	testenv.WaitFor(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		found, err := natstool.Discover(ctx, nc, "")
		if err != nil {
			return err
		}
		for _, f := range found {
			if f.Spec().Name == "ledger_append" {
				tool = f
				return nil
			}
		}
		return fmt.Errorf("ledger_append not discovered yet (found %d tools); stderr:\n%s", len(found), stderr.String())
	})
	if want := `{"type":"object","properties":{"entry":{"type":"string","description":"the line to append"}},"required":["entry"],"additionalProperties":false}`; tool.Spec().Schema != want {
		t.Errorf("schema %s\nwant   %s", tool.Spec().Schema, want)
	}

	key := turn.ReplayKey{Session: "s", Turn: "t", Iteration: 1, Kind: turn.KindToolCall, Effect: 2, Call: "c1"}
	call := func(key turn.ReplayKey, attempt int, inDoubt bool, entry string) string {
		t.Helper()
		ctx := tools.NewContext(context.Background(), tools.CallInfo{Key: key, Attempt: attempt, InDoubt: inDoubt})
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := tool.Call(ctx, json.RawMessage(`{"entry":"`+entry+`"}`))
		if err != nil || res.Status != turn.ToolOK {
			t.Fatalf("Call = %+v, %v", res, err)
		}
		return res.Output
	}
	if out := call(key, 1, false, "pay rent"); out != `appended "pay rent"` {
		t.Errorf("first call: %q", out)
	}
	if out := call(key, 2, true, "pay rent"); !strings.HasPrefix(out, "already appended") {
		t.Errorf("retry: %q", out)
	}
	other := key
	other.Call = "c2"
	call(other, 1, false, "pay rent")

	data, err := os.ReadFile(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	wantLedger := `{"key":"s/t/1/tool-call/2/c1","entry":"pay rent"}` + "\n" +
		`{"key":"s/t/1/tool-call/2/c2","entry":"pay rent"}` + "\n"
	if string(data) != wantLedger {
		t.Errorf("ledger:\n%s\nwant:\n%s", data, wantLedger)
	}

	wantLines := []string{
		`begin key=s/t/1/tool-call/2/c1 attempt=1 in_doubt=false`,
		`invoke key=s/t/1/tool-call/2/c1 attempt=1 in_doubt=false entry="pay rent" applied=true`,
		`begin key=s/t/1/tool-call/2/c1 attempt=2 in_doubt=true`,
		`invoke key=s/t/1/tool-call/2/c1 attempt=2 in_doubt=true entry="pay rent" applied=false`,
		`begin key=s/t/1/tool-call/2/c2 attempt=1 in_doubt=false`,
		`invoke key=s/t/1/tool-call/2/c2 attempt=1 in_doubt=false entry="pay rent" applied=true`,
	}
	// The program prints before it answers, but this test reads its stdout
	// on another goroutine.
	testenv.WaitFor(t, 10*time.Second, func() error {
		if got := lines.get(); len(got) < len(wantLines) {
			return fmt.Errorf("stdout so far: %q", got)
		}
		return nil
	})
	if got := lines.get(); strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
		t.Errorf("stdout:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", exitErr, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "draining") {
		t.Errorf("stderr lacks draining:\n%s", stderr.String())
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	var stderr testenv.Buffer
	err := run(context.Background(), func() {}, []string{"--delay", "soon"}, &testenv.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "invalid value") {
		t.Errorf("err = %v", err)
	}
	if err := run(context.Background(), func() {}, []string{"extra"}, &testenv.Buffer{}, &stderr); err == nil {
		t.Error("an extra argument was accepted")
	}
}

type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *lockedLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}
