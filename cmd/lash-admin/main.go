// Command lash-admin is the operator's view of a lash deployment: its
// sessions, transcripts, turns and journals, leases, live nodes and
// streams; it appends inputs and signals, and keeps a rebuildable cache
// of the session projection for its reads.
//
// It connects as lash-node does: the same connection flags, the same
// LASH_ environment and the same --config file, so one environment
// configures both. Run lash-admin --help for the commands, lash-admin
// GROUP -h for a group's subcommands (sessions, leases, nodes, quarantine),
// lash-admin COMMAND -h for one command.
//
// Exit status: 0 on success, 1 on a runtime error (one line on stderr),
// 2 on invalid usage (one line on stderr).
package main

import (
	"context"
	"github.com/lash-run/lash/codemode"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=1.2.3"; a
// module build reports its own.
var version = ""

func main() {
	codemode.ServeChild() // when started as the sandbox of a program verify replays
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal cancels the command; the second kills it.
		<-ctx.Done()
		stop()
	}()
	code := Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
