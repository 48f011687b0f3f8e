package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/lash-run/lash/gateway"
)

const story = "Once upon a time a durable runtime kept every word it said, and when the page reloaded the story went on exactly where it was."

// The example chat page (examples/chat) in headless Chromium, served from
// an origin of its own: a message sent, its answer visible while the turn
// still runs, a reload mid-answer after which the answer completes once,
// and a tool call approved from the page.
func TestExampleChatPage(t *testing.T) {
	page := httptest.NewServer(http.FileServer(http.Dir("../examples/chat")))
	defer page.Close()
	r := newRig(t, func(c *gateway.Config) { c.Origins = []string{page.URL} })
	tok := token(t, gateway.Grant{SessionPrefix: "web-", Decide: true})
	b := newBrowser(t)
	u := fmt.Sprintf("%s/?api=%s&token=%s&chat=web-1", page.URL, url.QueryEscape(r.http.URL), url.QueryEscape(tok))
	b.do(chromedp.Navigate(u), chromedp.WaitVisible("#text"))
	b.do(chromedp.SendKeys("#text", "tell me a story"), chromedp.Click("#send button"))
	// Part of the answer shows while the turn has not committed.
	b.until("a part of the answer", `(document.querySelector('.msg[data-role=assistant] .text')?.textContent ?? '').length > 0`)
	st, err := r.client.Status(r.ctx, "web-1")
	if err == nil && st.Turns > 0 {
		t.Fatalf("the turn committed before any of its answer showed: %+v", st)
	}
	partial := b.text(`document.querySelector('.msg[data-role=assistant] .text').textContent`)
	if partial == story {
		t.Fatal("the whole answer showed at once")
	}
	b.do(chromedp.Reload())
	b.until("the whole answer after the reload", fmt.Sprintf(`[...document.querySelectorAll('.msg[data-role=assistant] .text')].map(e => e.textContent).join('|') === %q`, story))
	if n := b.text(`String(document.querySelectorAll('.msg[data-role=user]').length)`); n != "1" {
		t.Fatalf("%s user messages after the reload", n)
	}
	// An approval from the page.
	b.do(chromedp.SendKeys("#text", "deploy it"), chromedp.Click("#send button"))
	b.until("the approval asked", `document.querySelector('button.approve') !== null`)
	b.do(chromedp.Click("button.approve"))
	b.until("the answer after the approval", `[...document.querySelectorAll('.msg[data-role=assistant]')].at(-1).textContent.includes('Deployed.')`)
	if s := b.text(`[...document.querySelectorAll('.tool')].at(-1).dataset.state`); s != "output-available" {
		t.Fatalf("the approved call shows %s", s)
	}
	if n := b.text(`String(document.querySelectorAll('.msg[data-role=assistant]').length)`); n != "2" {
		t.Fatalf("%s assistant messages: the approval's answer belongs to the message that asked", n)
	}
	if e := b.text(`document.getElementById('error').textContent`); e != "" {
		t.Fatalf("the page shows an error: %s", e)
	}
}

// chromium finds a Chromium the tests can drive, or skips the test.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const why = "no Chromium installed (apt-get install chromium): the example page's test needs one"
	if os.Getenv("LASH_REQUIRE_CHROMIUM") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancelAll := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelAll)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) text(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// until evaluates a JavaScript condition until it holds.
func (b *browser) until(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](cond))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerHTML`))
			href, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href`))
			b.t.Fatalf("%s: %v; the page (%s): %s", what, err, href, strings.TrimSpace(html))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
