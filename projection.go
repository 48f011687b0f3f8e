package lash

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
)

// OpenProjection opens the session read model of the deployment c belongs to
// in dir. Inputs that fail CheckInput are set aside in its quarantine.
func OpenProjection(dir string, c *streams.Client) (*projector.Projector, error) {
	prefix := c.Config().Prefix
	log := sessionlog.New(c, sessionlog.WithBlobs(turnBlobs(newBlobStore(c))))
	bodies := func(session string, e *sessionlog.Entry) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return log.Body(ctx, session, e)
	}
	p, err := projector.Open(dir, c, projector.Config{Stream: streams.Sessions, Filter: prefix + ".sess.>", Verify: c.Verify,
		Folds: []projector.Fold{projector.NewSessions(prefix, projector.WithInputCheck(CheckInput), projector.WithBodies(bodies))}})
	if err != nil {
		return nil, err
	}
	return p, rebuildIfStale(p, c, streams.Sessions)
}

// rebuildIfStale folds p again from the stream's start when a sweep removed
// deletion marks past what it folded (lifecycle.Stale): it could hold what
// was deleted. p is closed on an error.
func rebuildIfStale(p *projector.Projector, c *streams.Client, s streams.Stream) error {
	ctx, cancel := context.WithTimeout(context.Background(), streams.DefaultTimeout)
	stale, err := lifecycle.Stale(ctx, c, s, p.Applied())
	cancel()
	if err == nil && stale {
		err = p.Rebuild(context.Background())
	}
	if err != nil {
		p.Close()
		return fmt.Errorf("lash: read model of %s: %w", c.StreamName(s), err)
	}
	return nil
}

// OpenProcessProjection opens the read model of the deployment's
// processes in dir (projector.Processes).
func OpenProcessProjection(dir string, c *streams.Client) (*projector.Projector, error) {
	p, err := projector.Open(dir, c, projector.Config{Stream: streams.Processes, Filter: c.Subjects().AllProcesses(), Verify: c.Verify,
		Folds: []projector.Fold{projector.NewProcesses(c.Subjects())}})
	if err != nil {
		return nil, err
	}
	return p, rebuildIfStale(p, c, streams.Processes)
}

// CheckInput reports why data is not a readable input on the session's
// decision subject (decision) or its input subject, or nil. A node
// consumes such an input with a turn that records the error.
func CheckInput(data []byte, decision bool) error {
	_, err := parseInput(data, decision)
	return err
}

// OpenSignalProjection opens the read model of the deployment's signals in
// dir: the last signal on each subject. Signals that fail CheckSignal, or
// whose subject is over its bound (triggers.MaxSourceBytes), are set aside
// in its quarantine, and so are trigger records the deployment did not
// sign (streams.Client.Verify), which it reads for that alone.
func OpenSignalProjection(dir string, c *streams.Client) (*projector.Projector, error) {
	prefix := c.Config().Prefix
	return projector.Open(dir, c, projector.Config{Stream: streams.Triggers, Filter: c.Subjects().Signals(), More: []string{prefix + ".trig.>"},
		Verify: c.Verify, Folds: []projector.Fold{signalFold{c.Subjects()}}})
}

// signalFold keeps the last good signal's sequence per subject.
type signalFold struct{ subj streams.Subjects }

func (signalFold) Name() string { return "signals" }

func (f signalFold) Apply(tx *projector.Txn, m *streams.Msg) error {
	if _, ok := f.subj.SignalRest(m.Subject); !ok {
		return nil // a trigger record: only checked (Config.Verify)
	}
	if err := checkSignalAt(f.subj, m); err != nil {
		return fmt.Errorf("%w: %v", projector.ErrPoison, err)
	}
	return tx.Set([]byte("s/"+m.Subject), binary.BigEndian.AppendUint64(nil, m.Seq))
}
