package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/console"
	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
)

var uiCmd = &command{
	name:    "ui",
	summary: "serve the web console",
	doc: `Serves the web console on --http: sessions by last activity with their states, a
session's transcript as its answers stream, its turns, a turn's journal as a timeline
(replayed or executed, by which node, how long), calls waiting on a decision with
Approve and Deny, the quarantine, nodes and leases, processes and triggers. Each page
shows what the lash-admin command of the same name prints with --json; its JSON API is
under /api (see the README). Approve resumes a suspended call (decide ID CALL resume),
Deny cancels it; with --read-only the console makes no decision. The console has no
sign-in of its own and acts with lash-admin's credentials, so it listens on loopback
unless --read-only is given. It answers only requests for localhost, a loopback address,
the address it listens on, or a name --allow-host gives (a page whose name was
re-pointed at this machine is refused). It runs until interrupted.`,
	max: 0,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.httpAddr, "http", "127.0.0.1:7070", "listen on `host:port` (port 0 picks a free one)")
		fs.BoolVar(&a.readOnly, "read-only", false, "make no decisions: a console for viewers")
		fs.StringVar(&a.allowHosts, "allow-host", "", "more host `names`, comma-separated, that requests may name (the console's name on a network or behind a proxy)")
	},
	settings: leaseTTLSetting,
	check:    checkUI,
	run:      runUI,
}

func checkUI(a *app, _ []string) error {
	host, _, err := net.SplitHostPort(a.httpAddr)
	if err != nil {
		return a.usagef("--http %q: want host:port", a.httpAddr)
	}
	if !a.readOnly && !loopback(host) {
		return a.usagef("--http %s is not loopback: the console decides with lash-admin's credentials and has no sign-in, so serve it beyond this machine only with --read-only", a.httpAddr)
	}
	return nil
}

// consoleHosts are the hosts the console answers besides loopback ones:
// the address it listens on, when one is named, and --allow-host's.
func (a *app) consoleHosts() []string {
	var hosts []string
	if host, _, err := net.SplitHostPort(a.httpAddr); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, host)
		}
	}
	for _, h := range strings.Split(a.allowHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runUI(a *app, _ []string) error {
	// Fold the projection once now: a cache another process holds, or
	// a server that refuses reads, shows here rather than on a page.
	if _, err := a.projection(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.httpAddr)
	if err != nil {
		return err
	}
	mode := ""
	if a.readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(a.stdout, "lash-admin: console at http://%s/%s\n", ln.Addr(), mode)
	src := &consoleSource{a: a}
	srv := &http.Server{
		Handler:           console.Handler(src, console.Options{ReadOnly: a.readOnly, Version: "lash " + cli.Version(version), Hosts: a.consoleHosts()}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return a.ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-a.ctx.Done():
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	return nil
}

// consoleSource answers the console with lash-admin's own commands, one
// at a time, on this run's connection and cache.
type consoleSource struct {
	mu sync.Mutex
	a  *app
}

func (s *consoleSource) Run(ctx context.Context, argv []string, w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(argv) == 2 && (argv[0] == "nodes" || argv[0] == "leases") {
		argv = append(argv, "--lease-ttl="+s.a.leaseTTL.String())
	}
	b := &app{ctx: ctx, stdin: strings.NewReader(""), stdout: w, stderr: io.Discard,
		nc: s.a.nc, client: s.a.client, cache: s.a.cache}
	err := b.main(append([]string{"--json"}, argv...))
	var ue *usageError
	var nf notFound
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue), errors.Is(err, cli.ErrUsage), errors.Is(err, errHelp):
		return console.BadRequest(oneLine(err.Error()))
	case errors.Is(err, errUnknownSession), errors.Is(err, projector.ErrNotFound), errors.As(err, &nf):
		return console.NotFound(oneLine(err.Error()))
	}
	return errors.New(oneLine(err.Error()))
}

func (s *consoleSource) Follow(ctx context.Context, session string, after uint64, fn func(live.Record) error) error {
	return live.Follow(ctx, s.a.client, session, after, fn)
}

func (s *consoleSource) LiveTail(ctx context.Context) (uint64, error) {
	_, last, err := s.a.client.Bounds(ctx, streams.Live)
	return last, err
}

// notFound names something the deployment does not hold.
type notFound string

func (e notFound) Error() string { return string(e) }
