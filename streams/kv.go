package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVEntry is the live value of a key in the lease bucket.
type KVEntry struct {
	Key      string
	Value    []byte
	Revision uint64
	Created  time.Time
}

// KVCreate stores value under key only if the key holds no live value, with
// a per-key TTL (whole seconds, at least one; 0 for none). The revision it returns is a
// stream sequence: a later create of the same key always gets a larger one.
// A live key returns a *ConflictError.
func (c *Client) KVCreate(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var opts []jetstream.KVCreateOpt
	if ttl > 0 {
		opts = append(opts, jetstream.KeyTTL(ttl))
	}
	var rev uint64
	var err error
	if c.cfg.Intercept != nil {
		rev, err = intercepted(c, ctx, Call{Op: "kv.create", Subject: c.kvSubject(key)}, func(ctx context.Context) (uint64, error) {
			return c.leases.Create(ctx, key, value, opts...)
		})
	} else {
		rev, err = c.leases.Create(ctx, key, value, opts...)
	}
	if err != nil {
		return 0, c.kvErr("create", key, 0, err)
	}
	return rev, nil
}

// KVSwap replaces key's value if its revision is still rev, keeping a TTL.
// It publishes to the bucket's subject itself: the KV update call would
// drop the key's TTL.
func (c *Client) KVSwap(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	ack, err := c.publish(ctx, &nats.Msg{Subject: c.kvSubject(key), Data: value, Header: nats.Header{}}, pubOpts{expect: &rev, ttl: ttl, op: "kv.swap"})
	if err != nil {
		return 0, c.kvErr("swap", key, rev, err)
	}
	return ack.Sequence, nil
}

// KVDelete deletes key if its revision is still rev, and returns the
// revision of its delete marker; a successor's value is never removed. The
// marker expires like the marker of an expired key, so a key released
// leaves nothing behind: the bucket holds the live keys only, however many
// were ever used. It names itself a subject delete marker, so the server
// removes it when it expires without writing a marker of its own: one
// write per release, not two (each fsynced, on a server that fsyncs).
func (c *Client) KVDelete(ctx context.Context, key string, rev uint64) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	msg := nats.NewMsg(c.kvSubject(key))
	msg.Header.Set(kvOperation, kvOperationDelete)
	msg.Header.Set(jetstream.MarkerReasonHeader, markerRemoved)
	ack, err := c.publish(ctx, msg, pubOpts{expect: &rev, ttl: leaseMarkerTTL, op: "kv.delete"})
	if err != nil {
		return 0, c.kvErr("delete", key, rev, err)
	}
	return ack.Sequence, nil
}

// The header by which a KV bucket's readers tell a deletion from a value,
// and the marker reason by which the server tells a subject delete marker
// (which it removes at its TTL without leaving another).
const (
	kvOperation       = "KV-Operation"
	kvOperationDelete = "DEL"
	markerRemoved     = "Remove"
)

// KVGet returns key's live value, or ErrNotFound if it was never set, was
// deleted, or expired.
func (c *Client) KVGet(ctx context.Context, key string) (*KVEntry, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var e jetstream.KeyValueEntry
	err := retryRead(ctx, func() (err error) {
		if c.cfg.Intercept != nil {
			e, err = intercepted(c, ctx, Call{Op: "kv.get", Subject: c.kvSubject(key)}, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
				return c.leases.Get(ctx, key)
			})
			return err
		}
		e, err = c.leases.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("%w: key %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("streams: get %s: %w", key, err)
	}
	return &KVEntry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), Created: e.Created()}, nil
}

// KVList returns the live entries whose keys start with prefix. It asks
// the bucket's leader which keys exist and reads each from the leader, so
// it sees every write acknowledged before it started.
func (c *Client) KVList(ctx context.Context, prefix string) ([]KVEntry, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	// A subject filter wildcard only stands for whole tokens: list from the
	// last '.' of the prefix and keep the keys that really start with it.
	base := "$KV." + c.cfg.leaseBucket() + "."
	filter := base + ">"
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		filter = base + prefix[:i+1] + ">"
	}
	info, err := c.streamInfo(ctx, c.leaseStream, filter)
	if err != nil {
		return nil, fmt.Errorf("streams: list %s: %w", prefix, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if key := strings.TrimPrefix(subj, base); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	var out []KVEntry
	for _, key := range keys {
		e, err := c.KVGet(ctx, key)
		if errors.Is(err, ErrNotFound) {
			continue // deleted or expired
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	return out, nil
}

// kvSubject is the subject of key in the lease bucket.
func (c *Client) kvSubject(key string) string { return "$KV." + c.cfg.leaseBucket() + "." + key }

func (c *Client) kvErr(op, key string, rev uint64, err error) error {
	code := apiCode(err)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		code == codeWrongLastSequence || code == codeWrongLastSequenceConst {
		return &ConflictError{Subject: c.kvSubject(key), Expected: rev, Code: code}
	}
	return fmt.Errorf("streams: %s %s: %w", op, key, err)
}

// LeaseRevision is the lease bucket's newest revision, as its leader
// reports it: no lease's fencing token is above it.
func (c *Client) LeaseRevision(ctx context.Context) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	info, err := c.streamInfo(ctx, c.leaseStream, "")
	if err != nil {
		return 0, fmt.Errorf("streams: lease bucket info: %w", err)
	}
	return info.State.LastSeq, nil
}
