package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
)

// durabilityCheckTimeout bounds the check of the joined servers' fsync
// setting: the start waits no longer for it.
const durabilityCheckTimeout = 3 * time.Second

// checkDurability reads the fsync setting of the NATS servers the node
// joined and logs what it means for acknowledged writes (ADR 0044): a
// warning if a server acknowledges before fsync, one info line if the
// setting cannot be read with these credentials or every server fsyncs.
// It never fails the start.
//
// It asks on a connection of its own, closed when it is done: where the
// user may not publish to the system subject, the server's refusal stays
// off the node's connection and its error log.
func checkDurability(conn *cli.Conn, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), durabilityCheckTimeout)
	defer cancel()
	var report streams.SyncReport
	nc, err := conn.Connect("lash-node durability check", "", nats.NoReconnect(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		report.Unreadable = err.Error()
	} else {
		report = streams.ReadServerSync(ctx, nc)
		nc.Close()
	}
	v := report.Verdict(conn.Replicas)
	const see = "docs/durability.md"
	switch v.Level {
	case streams.SyncLazy:
		log.Warn(v.Message, "servers", v.Servers, "risk", v.Risk, "see", see)
	case streams.SyncSafe:
		log.Info(v.Message, "servers", v.Servers)
	case streams.SyncUnknown:
		if v.Servers == "" {
			log.Info(v.Message, "reason", v.Risk, "see", see)
		} else {
			log.Info(v.Message, "servers", v.Servers, "risk", v.Risk, "see", see)
		}
	}
}
