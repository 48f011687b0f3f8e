package streams

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SchemaVersion names the topology this build creates and expects. It is
// stored in the metadata of every stream and bucket; a deployment with
// another version is refused, never changed in place.
const SchemaVersion = 1

const (
	metaSchema = "lash.schema"
	metaPrefix = "lash.prefix"
)

// ErrSchemaMismatch: an existing stream or bucket differs from what this
// build expects. The *SchemaError says where.
var ErrSchemaMismatch = errors.New("streams: deployment does not match this build's schema")

// SchemaError names one difference between the deployment and this build.
type SchemaError struct {
	Stream string
	Field  string
	Want   string
	Got    string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("streams: %s: %s is %s, this build expects %s (schema version %d); refusing to change it",
		e.Stream, e.Field, e.Got, e.Want, SchemaVersion)
}

func (e *SchemaError) Unwrap() error { return ErrSchemaMismatch }

// Config sets the names and replication of one deployment.
type Config struct {
	// Prefix starts every subject and names every stream, so several
	// deployments can share an account. Lower case letters, digits, '_'
	// and '-'. Default "lash".
	Prefix string
	// Replicas of every stream and bucket: 1 on a single server, 3 in a
	// cluster. Default 1.
	Replicas int
	// DuplicateWindow is how long msg-id dedupe lasts. Default 2 minutes.
	DuplicateWindow time.Duration
	// MaxMsgSize caps one message; larger payloads go to the object store.
	// Default 1 MiB.
	MaxMsgSize int32
}

// Defaults.
const (
	DefaultPrefix          = "lash"
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultMaxMsgSize      = 1 << 20
)

var prefixRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = DefaultMaxMsgSize
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case !prefixRE.MatchString(c.Prefix):
		return fmt.Errorf("streams: prefix %q: use lower case letters, digits, '_' and '-'", c.Prefix)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("streams: replicas %d: must be 1 to 5", c.Replicas)
	case c.DuplicateWindow < time.Second:
		return fmt.Errorf("streams: duplicate window %s: must be at least a second", c.DuplicateWindow)
	case c.MaxMsgSize < 1024:
		return fmt.Errorf("streams: max message size %d: must be at least 1024", c.MaxMsgSize)
	}
	return nil
}

// Stream identifies one of the deployment's streams.
type Stream uint8

const (
	Sessions Stream = iota
	Effects
	Processes
	Triggers
	numStreams
)

var streamSuffix = [numStreams]string{"SESSIONS", "EFFECTS", "PROCESSES", "TRIGGERS"}

// Names of the deployment's streams and buckets.
func (c Config) streamName(s Stream) string {
	return strings.ToUpper(strings.ReplaceAll(c.Prefix, "-", "_")) + "_" + streamSuffix[s]
}

// LeaseBucket is the KV bucket of leases and node liveness.
func (c Config) leaseBucket() string {
	return strings.ToUpper(strings.ReplaceAll(c.Prefix, "-", "_")) + "_LEASES"
}

// leaseMarkerTTL is how long the marker left by an expired key lives, so
// watchers see expiry. It must be at least a second.
const leaseMarkerTTL = time.Second

func (c Config) metadata() map[string]string {
	return map[string]string{metaSchema: strconv.Itoa(SchemaVersion), metaPrefix: c.Prefix}
}

func (c Config) streamConfig(s Stream) jetstream.StreamConfig {
	p := c.Prefix
	subjects := map[Stream][]string{
		Sessions:  {p + ".sess.>"},
		Effects:   {p + ".fx.>"},
		Processes: {p + ".proc.>"},
		Triggers:  {p + ".signal.>", p + ".trig.>"},
	}[s]
	return jetstream.StreamConfig{
		Name:       c.streamName(s),
		Subjects:   subjects,
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardOld,
		Replicas:   c.Replicas,
		Duplicates: c.DuplicateWindow,
		MaxMsgSize: c.MaxMsgSize,
		// Reads after a conflict must see the leader's state; direct gets
		// may be answered by a lagging follower.
		AllowDirect:        false,
		AllowAtomicPublish: true,
		Metadata:           c.metadata(),
	}
}

func (c Config) leaseConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         c.leaseBucket(),
		Description:    "lash leases and node liveness",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       c.Replicas,
		LimitMarkerTTL: leaseMarkerTTL,
		Metadata:       c.metadata(),
	}
}

// Ensure creates the streams and buckets that are missing and checks those
// that exist. A difference in anything this build relies on is refused with
// a *SchemaError; nothing existing is ever changed.
func (c *Client) Ensure(ctx context.Context) error {
	for s := Stream(0); s < numStreams; s++ {
		want := c.cfg.streamConfig(s)
		st, err := c.js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = c.js.Stream(ctx, want.Name)
			if err == nil {
				err = compareStream(want, st.CachedInfo().Config)
			}
		}
		if err != nil {
			return fmt.Errorf("streams: ensure %s: %w", want.Name, err)
		}
		c.streams[s] = st
	}
	kvc := c.cfg.leaseConfig()
	kv, err := c.js.CreateKeyValue(ctx, kvc)
	if errors.Is(err, jetstream.ErrBucketExists) {
		if kv, err = c.js.KeyValue(ctx, kvc.Bucket); err == nil {
			err = c.compareBucket(ctx, kvc)
		}
	}
	if err != nil {
		return fmt.Errorf("streams: ensure bucket %s: %w", kvc.Bucket, err)
	}
	c.leases = kv
	return nil
}

// compareStream checks the fields whose meaning the write rules depend on.
func compareStream(want, got jetstream.StreamConfig) error {
	diff := func(field string, w, g any) error {
		return &SchemaError{Stream: want.Name, Field: field, Want: fmt.Sprint(w), Got: fmt.Sprint(g)}
	}
	if w, g := want.Metadata[metaSchema], got.Metadata[metaSchema]; w != g {
		if g == "" {
			g = "absent"
		}
		return diff("schema version", w, g)
	}
	switch {
	case !slices.Equal(want.Subjects, got.Subjects):
		return diff("subjects", want.Subjects, got.Subjects)
	case want.Storage != got.Storage:
		return diff("storage", want.Storage, got.Storage)
	case want.Retention != got.Retention:
		return diff("retention", want.Retention, got.Retention)
	case want.Replicas != got.Replicas:
		return diff("replicas", want.Replicas, got.Replicas)
	case want.AllowAtomicPublish != got.AllowAtomicPublish:
		return diff("atomic publish", want.AllowAtomicPublish, got.AllowAtomicPublish)
	case want.AllowDirect != got.AllowDirect:
		return diff("direct get", want.AllowDirect, got.AllowDirect)
	case want.Duplicates != got.Duplicates:
		return diff("duplicate window", want.Duplicates, got.Duplicates)
	case want.MaxMsgSize != got.MaxMsgSize:
		return diff("max message size", want.MaxMsgSize, got.MaxMsgSize)
	case want.MaxAge != got.MaxAge || want.MaxMsgs != got.MaxMsgs || want.MaxBytes != got.MaxBytes:
		return diff("limits", fmt.Sprintf("age %s msgs %d bytes %d", want.MaxAge, want.MaxMsgs, want.MaxBytes),
			fmt.Sprintf("age %s msgs %d bytes %d", got.MaxAge, got.MaxMsgs, got.MaxBytes))
	}
	return nil
}

func (c *Client) compareBucket(ctx context.Context, want jetstream.KeyValueConfig) error {
	st, err := c.js.Stream(ctx, "KV_"+want.Bucket)
	if err != nil {
		return err
	}
	got := st.CachedInfo().Config
	name := "bucket " + want.Bucket
	switch {
	case got.Metadata[metaSchema] != want.Metadata[metaSchema]:
		return &SchemaError{Stream: name, Field: "schema version", Want: want.Metadata[metaSchema], Got: fmt.Sprintf("%q", got.Metadata[metaSchema])}
	case got.Replicas != want.Replicas:
		return &SchemaError{Stream: name, Field: "replicas", Want: fmt.Sprint(want.Replicas), Got: fmt.Sprint(got.Replicas)}
	case got.SubjectDeleteMarkerTTL != want.LimitMarkerTTL:
		return &SchemaError{Stream: name, Field: "limit marker TTL", Want: want.LimitMarkerTTL.String(), Got: got.SubjectDeleteMarkerTTL.String()}
	case got.MaxMsgsPerSubject != int64(want.History):
		return &SchemaError{Stream: name, Field: "history", Want: fmt.Sprint(want.History), Got: fmt.Sprint(got.MaxMsgsPerSubject)}
	}
	return nil
}
