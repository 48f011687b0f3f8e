// Command lash-node runs a lash node: it takes session inputs from NATS
// JetStream and runs their turns durably, serves the node API, health and
// metrics; `lash-node demo` walks through a crash and its replay. Run
// `lash-node --help` for its settings.
package main

import (
	"context"
	"fmt"
	"github.com/lash-run/lash/codemode"
	"os"
	"os/signal"
	"syscall"

	"github.com/lash-run/lash/internal/cli"
)

// version is the node's version, set at build time with
// -ldflags "-X main.version=1.2.3"; a module build reports its own.
var version = ""

// nodeVersion is version as SemVer, as the node API needs it.
func nodeVersion() string { return cli.Version(version) }

func main() {
	codemode.ServeChild() // when started as a program's sandbox
	ctx, drain := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		drain() // the first signal drains
		s := <-sigs
		fmt.Fprintf(os.Stderr, "lash-node: %s again: exiting at once\n", s)
		os.Exit(1)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
