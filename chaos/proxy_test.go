package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
)

// echo serves a line echo on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func proxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen(echo(t), 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t, c, bufio.NewReader(c)}
}

// say sends a line and reads the echo, within d.
func (c *client) say(line string, d time.Duration) (string, error) {
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	got, err := c.r.ReadString('\n')
	return got, err
}

// A partition holds bytes, losing none: nothing comes back while it lasts
// (the read's deadline passes), and what was held arrives once healed.
func TestPartitionHoldsAndHeals(t *testing.T) {
	for _, dir := range []Direction{Up, Down, Both} {
		p := proxy(t)
		c := dial(t, p)
		if got, err := c.say("before", 5*time.Second); err != nil || got != "before\n" {
			t.Fatalf("through a clear link: %q, %v", got, err)
		}
		p.Partition(dir)
		if got, err := c.say("during", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("direction %d: through a partition: %q, %v", dir, got, err)
		}
		p.Heal()
		_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, err := c.r.ReadString('\n'); err != nil || got != "during\n" {
			t.Fatalf("direction %d: after healing: %q, %v", dir, got, err)
		}
		if p.Stats().Held.Load() == 0 {
			t.Fatalf("direction %d: the partition held nothing", dir)
		}
	}
}

// A cut closes the open connections; new ones go through, unless refused.
func TestCutAndRefuse(t *testing.T) {
	p := proxy(t)
	c := dial(t, p)
	if _, err := c.say("hello", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a cut connection read %v, want it closed", err)
	}
	if got, err := dial(t, p).say("again", 5*time.Second); err != nil || got != "again\n" {
		t.Fatalf("a new connection after a cut: %q, %v", got, err)
	}
	p.Refuse(true)
	if _, err := dial(t, p).say("refused", 5*time.Second); err == nil {
		t.Fatal("a refused connection carried bytes")
	}
	p.Refuse(false)
	if got, err := dial(t, p).say("taken", 5*time.Second); err != nil || got != "taken\n" {
		t.Fatalf("after refusing: %q, %v", got, err)
	}
	if s := p.Stats(); s.Cut.Load() == 0 || s.Refused.Load() != 1 {
		t.Fatalf("cut %d, refused %d", s.Cut.Load(), s.Refused.Load())
	}
}

// A delay holds each chunk; bytes still arrive whole and in order.
func TestDelay(t *testing.T) {
	p := proxy(t)
	p.Delay(10*time.Millisecond, 10*time.Millisecond)
	c := dial(t, p)
	for _, line := range []string{"one", "two", "three"} {
		if got, err := c.say(line, 5*time.Second); err != nil || got != line+"\n" {
			t.Fatalf("through a slow link: %q, %v", got, err)
		}
	}
	if p.Stats().Delayed.Load() < 6 {
		t.Fatalf("%d chunks delayed, want every one each way", p.Stats().Delayed.Load())
	}
}

// Between a NATS client and a real server: a partition stops requests
// (the client's request times out), healing lets them through again, and
// a cut makes the client reconnect through the proxy.
func TestProxyNATS(t *testing.T) {
	srv := testenv.RunJetStream(t)
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := Listen(u.Host, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	served := srv.Conn(t)
	if _, err := served.Subscribe("ping", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+p.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Request("ping", nil, 5*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Partition(Both)
	if _, err := nc.Request("ping", nil, 300*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("through a partition: %v", err)
	}
	p.Heal()
	testenv.WaitFor(t, 10*time.Second, func() error {
		_, err := nc.Request("ping", nil, time.Second)
		return err
	})
	accepted := p.Stats().Accepted.Load()
	p.Cut()
	testenv.WaitFor(t, 10*time.Second, func() error {
		if _, err := nc.Request("ping", nil, time.Second); err != nil {
			return err
		}
		if p.Stats().Accepted.Load() == accepted {
			return errors.New("the client has not reconnected")
		}
		return nil
	})
}
