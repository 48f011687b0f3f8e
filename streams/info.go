package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamInfo is one of the deployment's streams as an operator reads it.
type StreamInfo struct {
	Name     string
	Subjects []string
	// Bucket names the KV bucket the stream holds, for the lease bucket's
	// stream; it is empty for the other streams.
	Bucket    string
	Messages  uint64
	Bytes     uint64
	FirstSeq  uint64
	LastSeq   uint64
	Consumers int
	Replicas  int
	// Leader is the server leading the stream on a cluster.
	Leader string
	// Created is when the stream was created: a stream deleted and made
	// again has another.
	Created time.Time
	// Schema is the schema version in the stream's metadata.
	Schema string
	// Missing: the stream is not on the server (LIVE after a server's
	// restart, until a node makes it again); nothing else is known.
	Missing bool
}

// Info reads the state of the deployment's streams, in the order Sessions,
// Effects, Processes, Triggers, then the lease bucket's stream, from their
// leaders.
func (c *Client) Info(ctx context.Context) ([]StreamInfo, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var all []jetstream.Stream
	for s := Stream(0); s < numStreams; s++ {
		st, err := c.stream(ctx, s)
		if errors.Is(err, ErrStreamMissing) {
			all = append(all, nil)
			continue
		}
		if err != nil {
			return nil, err
		}
		all = append(all, st)
	}
	all = append(all, c.leaseStream)
	out := make([]StreamInfo, 0, len(all))
	for i, st := range all {
		if st == nil {
			out = append(out, StreamInfo{Name: c.cfg.streamName(Stream(i)), Missing: true})
			continue
		}
		info, err := c.streamInfo(ctx, st, "")
		if errors.Is(err, jetstream.ErrStreamNotFound) && i < int(numStreams) {
			out = append(out, StreamInfo{Name: c.cfg.streamName(Stream(i)), Missing: true})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("streams: info %s: %w", st.CachedInfo().Config.Name, err)
		}
		si := StreamInfo{Name: info.Config.Name, Subjects: info.Config.Subjects, Messages: info.State.Msgs,
			Bytes: info.State.Bytes, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq,
			Consumers: info.State.Consumers, Replicas: info.Config.Replicas, Created: info.Created,
			Schema: info.Config.Metadata[metaSchema]}
		if i == len(all)-1 {
			si.Bucket = c.cfg.leaseBucket()
		}
		if info.Cluster != nil {
			si.Leader = info.Cluster.Leader
		}
		out = append(out, si)
	}
	return out, nil
}
