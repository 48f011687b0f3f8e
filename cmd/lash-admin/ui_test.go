package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
)

// consoleScript streams its story slowly, so a page can be caught in the
// middle of it, and asks for a transfer that waits on an approval.
const consoleScript = `
rule transfer
  when user contains transfer
  when tools = 0
  call transfer {"to":"bob","amount":100}
  usage 20 10

rule story
  when user contains story
  say Once upon a time a durable agent outlived every crash and finished its work.
  pace 120ms
  usage 12 16

default
  say Done.
  usage 10 5
`

// approvalTools holds a transfer that runs once a decision resumes it.
func approvalTools(t *testing.T) *tools.Registry {
	reg := tools.New()
	transfer, err := tools.Func("transfer", "send money", func(ctx context.Context, a struct {
		To     string `json:"to"`
		Amount int    `json:"amount"`
	}) (string, error) {
		if info, ok := tools.Info(ctx); ok && info.Decision != nil {
			return fmt.Sprintf("sent %d to %s", a.Amount, a.To), nil
		}
		return "", tools.Pending("approve the transfer?")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(transfer); err != nil {
		t.Fatal(err)
	}
	return reg
}

// chromium finds a Chromium the tests can drive, or skips the test.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const why = "no Chromium installed (apt-get install chromium): the console's browser tests need one"
	if os.Getenv("LASH_REQUIRE_CHROMIUM") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

// startUI runs lash-admin ui and returns the console's URL.
func (a *admin) startUI(args ...string) string {
	a.t.Helper()
	cmd := exec.Command(a.bin, append([]string{"--nats", a.url, "--cache", a.t.TempDir(), "ui", "--http", "127.0.0.1:0"}, args...)...)
	cmd.Env = cleanEnv(a.t)
	out, err := cmd.StdoutPipe()
	if err != nil {
		a.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		_, url, ok := strings.Cut(l, "console at ")
		if !ok {
			a.t.Fatalf("lash-admin ui printed %q; stderr: %s", l, stderr.String())
		}
		url, _, _ = strings.Cut(url, " ")
		return strings.TrimSuffix(url, "/")
	case <-time.After(30 * time.Second):
		a.t.Fatalf("lash-admin ui did not start; stderr: %s", stderr.String())
	}
	return ""
}

// browser drives one headless Chromium tab and saves screenshots.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func newBrowser(t *testing.T) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancelAll := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelAll)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx, dir: t.ArtifactDir()}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// until evaluates a JavaScript condition until it holds.
func (b *browser) until(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](cond))
		if err != nil {
			b.t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("main")))
			b.t.Fatalf("%s: not within 30 s; the page shows:\n%s", what, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// page opens a console page and waits until it shows its title and no
// error.
func (b *browser) page(url, title string) {
	b.t.Helper()
	b.do(chromedp.Navigate(url))
	b.until("page "+url, fmt.Sprintf(`(() => { const h = document.querySelector("main h1"); return !!h && h.textContent.startsWith(%q) && !document.querySelector("main .error"); })()`, title))
}

// The console in headless Chromium against a node serving real turns:
// every page renders (a screenshot each), a session's page shows an answer
// as it streams and then the committed transcript, approving a suspended
// call from the page resumes the turn, and a read-only console shows the
// call without buttons and refuses the decision.
func TestConsole(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	n := servingNode(t, srv, consoleScript, approvalTools(t))
	a := &admin{t: t, bin: buildAdmin(t, t.TempDir()), url: srv.URL(), cache: t.TempDir()}

	var ans answerJSON
	a.json(&ans, "send", "s1", "hello", "--wait", "--label", "team=care")
	a.json(&ans, "send", "s2", "transfer 100 to bob", "--wait")
	if ans.Status != "waiting" {
		t.Fatalf("s2 after the transfer: %+v", ans)
	}
	if _, _, err := n.Streams().Publish(ctx, streams.Publication{Subject: "lash.sess.x.in", Data: []byte(`{"nope":1}`)}); err != nil {
		t.Fatal(err)
	}

	url := a.startUI()
	b := newBrowser(t)

	b.page(url+"/#/sessions", "Sessions")
	b.until("s2 listed as waiting", `(() => { const r = document.querySelector('tr[data-session="s2"]'); return !!r && r.textContent.includes("waiting"); })()`)
	b.screenshot("sessions")
	b.do(chromedp.Navigate(url + "/#/sessions?state=waiting"))
	b.until("the state filter keeps s2 alone", `!!document.querySelector('tr[data-session="s2"]') && !document.querySelector('tr[data-session="s1"]')`)
	b.do(chromedp.Navigate(url + "/#/sessions?label=team%3Dcare"))
	b.until("the label filter keeps s1 alone", `(() => { const r = document.querySelector('tr[data-session="s1"]'); return !!r && r.textContent.includes("team=care") && r.textContent.includes("default") && !document.querySelector('tr[data-session="s2"]') && !!document.getElementById("label-filter"); })()`)
	// Pages of one, the latest active first: x (its malformed input came
	// last), then s2 through the next link.
	b.do(chromedp.Navigate(url + "/#/sessions?limit=1"))
	b.until("the first page", `document.querySelectorAll("tr[data-session]").length === 1 && !!document.querySelector('tr[data-session="x"]') && !!document.getElementById("next-page")`)
	b.do(chromedp.Click(chromedp.CSS("#next-page")))
	b.until("the second page", `document.querySelectorAll("tr[data-session]").length === 1 && !!document.querySelector('tr[data-session="s2"]') && !!document.getElementById("first-page")`)

	// A streamed answer: deltas on the page before the turn commits.
	b.page(url+"/#/sessions/s1", "Session")
	b.until("live events followed", `document.getElementById("live-status").textContent === "following live events"`)
	seq, _, err := n.Session("s1").Send(ctx, "k-story", lash.Input{Text: "tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	b.until("a piece of the answer streams", `(() => { const s = document.getElementById("stream"); return !s.hidden && s.textContent.startsWith("Once upon") && !s.textContent.includes("finished its work"); })()`)
	b.screenshot("session-streaming")
	story := "Once upon a time a durable agent outlived every crash and finished its work."
	b.until("the committed answer in the transcript", fmt.Sprintf(`(() => { const ms = [...document.querySelectorAll("#transcript .msg.assistant")]; return ms.length >= 2 && ms[ms.length-1].textContent.endsWith(%q) && document.getElementById("stream").hidden && document.querySelectorAll("#turns tbody tr").length === 2; })()`, story))
	b.until("no undefined value", `!document.querySelector("main").textContent.includes("undefined")`)
	b.screenshot("session")

	// The story turn's journal as a timeline.
	tid := fmt.Sprintf("in-%d", seq)
	b.page(url+"/#/sessions/s1/turns/"+tid, "Turn")
	b.until("the model call executed", `[...document.querySelectorAll(".timeline tbody tr")].some(r => r.textContent.includes("llm-call") && r.textContent.includes("executed") && r.textContent.includes("node-a"))`)
	b.screenshot("journal")

	// Approve from the page: the turn resumes and runs the transfer.
	b.page(url+"/#/sessions/s2", "Session")
	b.until("the suspended call with its buttons", `!!document.querySelector('#calls button.approve') && document.querySelector('#calls').textContent.includes("approve the transfer?")`)
	b.screenshot("approval")
	b.do(chromedp.Click(chromedp.CSS("#calls button.approve")))
	b.until("the turn resumed and committed", `(() => { const t = document.getElementById("transcript").textContent; return t.includes("sent 100 to bob") && t.includes("Done.") && !document.querySelector("#calls .call") && document.getElementById("session-state").textContent === "idle"; })()`)
	b.screenshot("approved")
	if h, err := a.headOf("s2"); err != nil || h.Suspended != 0 || h.Turns != 2 {
		t.Fatalf("s2 after the approval: %+v %v", h, err)
	}

	a.ok("triggers", "register", "deploys", "--source", "deploy.>", "--tool", "transfer", "--owner", "session:s1", "--op", "op-1")
	agentFile := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(agentFile, []byte("name: support\ninstructions: |\n  You <b>answer</b> customers.\nprovider: anthropic\nmodel: claude-x\ntools: [transfer]\nlabels: {team: care}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.ok("agents", "apply", "-f", agentFile, "--allow-unknown-tools")
	for _, p := range []struct{ hash, title, shows string }{
		{"agents", "Agents", "team=care"},
		{"agents/support", "Agent support", "You <b>answer</b> customers."},
		{"quarantine", "Quarantine", "lash.sess.x.in"},
		{"nodes", "Nodes", "node-a"},
		{"processes", "Processes", ""},
		{"triggers", "Triggers", "session s1"},
	} {
		b.page(url+"/#/"+p.hash, p.title)
		if p.shows != "" {
			b.until(p.hash+" shows "+p.shows, fmt.Sprintf(`document.querySelector("main").textContent.includes(%q)`, p.shows))
		}
		b.until(p.hash+" shows no undefined value", `(() => { const t = document.querySelector("main").textContent; return !t.includes("undefined") && !t.includes("[object"); })()`)
		b.screenshot(strings.ReplaceAll(p.hash, "/", "-"))
	}

	// Read-only: the call is shown, no button; the API refuses the
	// decision, and nothing is appended.
	a.json(&ans, "send", "s3", "transfer 100 to bob", "--wait")
	ro := a.startUI("--read-only")
	b.page(ro+"/#/sessions/s3", "Session")
	b.until("the call without buttons", `document.querySelector("#calls").textContent.includes("read-only console") && !document.querySelector("#calls button")`)
	b.screenshot("read-only")
	before := lastSeq(t, n.Streams(), streams.Sessions)
	decision := `{"call_id":"call_1","action":"approve","key":"k1"}`
	for _, c := range []struct {
		url, ctype, origin string
		want               int
	}{
		{ro, "application/json", "", http.StatusForbidden},
		{url, "text/plain", "", http.StatusUnsupportedMediaType},
		{url, "application/json", "http://evil.example", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("POST", c.url+"/api/sessions/s3/decide", strings.NewReader(decision))
		req.Header.Set("Content-Type", c.ctype)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("decide at %s as %s from %q: %d, want %d", c.url, c.ctype, c.origin, res.StatusCode, c.want)
		}
	}
	if after := lastSeq(t, n.Streams(), streams.Sessions); after != before {
		t.Fatalf("refused decisions appended %d messages", after-before)
	}
	// Bad query values are the caller's mistake, answered 400.
	for _, q := range []string{"limit=-1", "limit=0", "limit=lots", "sort=size", "state=asleep"} {
		res, err := http.Get(url + "/api/sessions?" + q)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /api/sessions?%s: %d, want 400", q, res.StatusCode)
		}
	}
	a.fails(2, "serve it beyond this machine only with --read-only", "ui", "--http", "0.0.0.0:0")
}

// headOf reads a session's head through lash-admin.
func (a *admin) headOf(id string) (sessionJSON, error) {
	r := a.run("sessions", "show", id, "--json")
	var h sessionJSON
	if r.code != 0 {
		return h, errors.New(r.stderr)
	}
	return h, json.Unmarshal([]byte(r.stdout), &h)
}
