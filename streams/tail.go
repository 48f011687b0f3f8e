package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Tail calls fn for every message of stream s matching filters, from
// sequence from on, in order, as they are stored, until ctx ends (it then
// returns ctx.Err()) or fn returns an error (returned as it is). pending is
// how many matching messages were stored after m when m was delivered: 0
// means the reader has caught up. Tail keeps no state on the server; a
// restarted reader resumes from its own cursor.
func (c *Client) Tail(ctx context.Context, s Stream, filters []string, from uint64, fn func(m *Msg, pending uint64) error) error {
	st, err := c.stream(ctx, s)
	if err != nil {
		return err
	}
	return c.tail(ctx, st, filters, from, fn)
}

func (c *Client) tail(ctx context.Context, st jetstream.Stream, filters []string, from uint64, fn func(m *Msg, pending uint64) error) error {
	// Ordered consumers outlive a stopped reader for their inactive
	// threshold (five minutes by default): readers come and go by the
	// thousand, so shorten it, and delete the consumer when done.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: 30 * time.Second}
	if from > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	var cons jetstream.Consumer
	err := retryRead(ctx, func() (err error) {
		if c.cfg.Intercept != nil {
			cons, err = intercepted(c, ctx, Call{Op: "tail", Subject: st.CachedInfo().Config.Name}, func(ctx context.Context) (jetstream.Consumer, error) {
				return st.OrderedConsumer(ctx, cfg)
			})
			return err
		}
		cons, err = st.OrderedConsumer(ctx, cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("streams: tail %s: %w", st.CachedInfo().Config.Name, err)
	}
	// Short pull expiries and heartbeats: on a cluster the first pull can
	// reach a server that does not know the new consumer yet and be lost;
	// a missed heartbeat then resets the consumer within a second or two.
	it, err := cons.Messages(jetstream.PullExpiry(2*time.Second), jetstream.PullHeartbeat(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("streams: tail %s: %w", st.CachedInfo().Config.Name, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer func() {
		it.Stop()
		if info := cons.CachedInfo(); info != nil {
			go func(name string) {
				dctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
				defer cancel()
				_ = st.DeleteConsumer(dctx, name)
			}(info.Name)
		}
	}()
	for {
		raw, err := it.Next()
		if err != nil {
			// Only the caller's context ends a tail quietly: a closed
			// connection mid-read must not pass for having read it all.
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("streams: tail %s: %w", st.CachedInfo().Config.Name, err)
		}
		meta, err := raw.Metadata()
		if err != nil {
			return fmt.Errorf("streams: tail %s: %w", st.CachedInfo().Config.Name, err)
		}
		m := &Msg{Subject: raw.Subject(), Seq: meta.Sequence.Stream, Header: raw.Headers(), Data: raw.Data(), Time: meta.Timestamp}
		if err := fn(m, meta.NumPending); errors.Is(err, errCaughtUp) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// LastSeq is the sequence of the last message stored in stream s, as its
// leader reports it.
func (c *Client) LastSeq(ctx context.Context, s Stream) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	info, err := c.info(ctx, s)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// Bounds are the first and last sequences stream s keeps, as its leader
// reports them; an empty stream has first = last+1.
func (c *Client) Bounds(ctx context.Context, s Stream) (first, last uint64, err error) {
	info, err := c.info(ctx, s)
	if err != nil {
		return 0, 0, err
	}
	return info.State.FirstSeq, info.State.LastSeq, nil
}

// Consumers counts the consumers a stream has: for LIVE, its followers.
func (c *Client) Consumers(ctx context.Context, s Stream) (int, error) {
	info, err := c.info(ctx, s)
	if err != nil {
		return 0, err
	}
	return info.State.Consumers, nil
}

func (c *Client) info(ctx context.Context, s Stream) (*jetstream.StreamInfo, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	st, err := c.stream(ctx, s)
	if err != nil {
		return nil, err
	}
	info, err := c.streamInfo(ctx, st, "")
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		err = fmt.Errorf("%w: %s is not on the server", ErrStreamMissing, c.cfg.streamName(s))
	}
	if err != nil {
		return nil, fmt.Errorf("streams: info %s: %w", c.cfg.streamName(s), err)
	}
	return info, nil
}

// streamInfo reads the state of st from its leader, with the subjects that
// match filter unless it is empty.
func (c *Client) streamInfo(ctx context.Context, st jetstream.Stream, filter string) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	err := retryRead(ctx, func() (err error) {
		info, err = c.streamInfoOnce(ctx, st, infoOpts(filter))
		return err
	})
	return info, err
}

func (c *Client) streamInfoOnce(ctx context.Context, st jetstream.Stream, opts []jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	if c.cfg.Intercept != nil {
		return intercepted(c, ctx, Call{Op: "info", Subject: st.CachedInfo().Config.Name}, func(ctx context.Context) (*jetstream.StreamInfo, error) {
			return st.Info(ctx, opts...)
		})
	}
	return st.Info(ctx, opts...)
}

func infoOpts(filter string) []jetstream.StreamInfoOpt {
	if filter == "" {
		return nil
	}
	return []jetstream.StreamInfoOpt{jetstream.WithSubjectFilter(filter)}
}

// IsBatchCommit and BatchID read the atomic batch headers a stored message
// keeps, so readers can apply a batch all or nothing.
func (m *Msg) BatchID() string { return m.Header.Get(hdrBatchID) }

// IsBatchCommit reports whether m is the last message of its atomic batch.
func (m *Msg) IsBatchCommit() bool { return m.Header.Get(hdrBatchCommit) != "" }

// SubjectCounts lists the subjects of stream s that match filter, with
// how many messages each holds, as the leader reports them: no payload is
// read.
func (c *Client) SubjectCounts(ctx context.Context, s Stream, filter string) (map[string]uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	st, err := c.stream(ctx, s)
	if err != nil {
		return nil, err
	}
	info, err := c.streamInfo(ctx, st, filter)
	if err != nil {
		return nil, fmt.Errorf("streams: subjects of %s: %w", c.cfg.streamName(s), err)
	}
	if info.State.Subjects == nil {
		return map[string]uint64{}, nil
	}
	return info.State.Subjects, nil
}
