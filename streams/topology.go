package streams

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SchemaVersion names the topology this build creates and expects. It is
// stored in the metadata of every stream and bucket; a deployment with
// another version is refused, never changed in place.
const SchemaVersion = 2

const (
	metaSchema = "lash.schema"
	metaPrefix = "lash.prefix"
	// Payload limits are the deployment's, not a node's: every reader must
	// accept what any writer stores.
	metaInline     = "lash.inline_bytes"
	metaMaxPayload = "lash.max_payload_bytes"
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
	// deployments can share an account. At most 32 lower case letters,
	// digits, '_' and '-'. Default "lash".
	Prefix string
	// Replicas of every stream and bucket: 1 on a single server, 3 in a
	// cluster. Default 1.
	Replicas int
	// DuplicateWindow is how long msg-id dedupe lasts. Default 2 minutes.
	DuplicateWindow time.Duration
	// MaxMsgSize caps one message of the EFFECTS, PROCESSES and TRIGGERS
	// streams, headers included. Default 1 MiB.
	MaxMsgSize int32
	// MaxInputBytes caps one message of the SESSIONS stream, headers
	// included: an input larger than that is refused by the stream when it
	// is published, never stored. Log entries fit too, since bodies above
	// InlineBytes go to the object store. Default 256 KiB.
	MaxInputBytes int32
	// InlineBytes is the largest payload (a journaled answer, a commit's
	// body) carried inside its message; larger ones are stored in the
	// object store under their sha256 and the message carries the
	// reference. Default 64 KiB.
	InlineBytes int
	// MaxPayloadBytes caps one payload by reference: a model answer or a
	// tool result above it is recorded as an error instead. Default 32 MiB.
	MaxPayloadBytes int64
	// LiveRetention and LiveMaxBytes bound the LIVE stream, where live
	// events are kept for watchers that reconnect: the oldest are dropped
	// first. Defaults 1 hour and 64 MiB. LiveFile keeps them in files
	// instead of memory, so they outlive a server restart.
	LiveRetention time.Duration
	LiveMaxBytes  int64
	LiveFile      bool
	// Intercept, if set, sees every round trip of the client to the
	// servers (Interceptor): tests wrap the store with it to fail, delay,
	// repeat or cut calls. It is the client's own, not the deployment's.
	Intercept Interceptor
}

// Defaults.
const (
	DefaultPrefix          = "lash"
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultMaxMsgSize      = 1 << 20
	DefaultMaxInputBytes   = 256 << 10
	DefaultInlineBytes     = 64 << 10
	DefaultMaxPayloadBytes = 32 << 20
	// entrySlack is what a log entry or journal record adds around an
	// inline payload: its fields and headers (msg ids name the subject).
	entrySlack = 8 << 10
	// DefaultLiveRetention and DefaultLiveMaxBytes bound the LIVE stream.
	DefaultLiveRetention = time.Hour
	DefaultLiveMaxBytes  = 64 << 20
	// MaxLiveConsumers bounds the consumers on the LIVE stream: the
	// followers of live events from a cursor (operators, the node API's
	// reads), each a reader the server serves.
	MaxLiveConsumers = 4096
)

var prefixRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

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
	if c.MaxInputBytes == 0 {
		c.MaxInputBytes = DefaultMaxInputBytes
	}
	if c.InlineBytes == 0 {
		c.InlineBytes = DefaultInlineBytes
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.LiveRetention == 0 {
		c.LiveRetention = DefaultLiveRetention
	}
	if c.LiveMaxBytes == 0 {
		c.LiveMaxBytes = DefaultLiveMaxBytes
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case !prefixRE.MatchString(c.Prefix):
		return fmt.Errorf("streams: prefix %q: use at most 32 lower case letters, digits, '_' and '-'", c.Prefix)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("streams: replicas %d: must be 1 to 5", c.Replicas)
	case c.DuplicateWindow < time.Second:
		return fmt.Errorf("streams: duplicate window %s: must be at least a second", c.DuplicateWindow)
	case c.LiveRetention < time.Second || c.LiveMaxBytes < 1<<20:
		return fmt.Errorf("streams: live retention %s and max bytes %d: at least a second and 1 MiB", c.LiveRetention, c.LiveMaxBytes)
	case c.MaxMsgSize < 1024:
		return fmt.Errorf("streams: max message size %d: must be at least 1024", c.MaxMsgSize)
	case c.InlineBytes < 1:
		return fmt.Errorf("streams: inline bytes %d: must be positive", c.InlineBytes)
	case int64(c.InlineBytes)+entrySlack > int64(c.MaxInputBytes):
		return fmt.Errorf("streams: inline bytes %d: must leave %d bytes of the max input size %d for the entry around it", c.InlineBytes, entrySlack, c.MaxInputBytes)
	case int64(c.InlineBytes)+entrySlack > int64(c.MaxMsgSize):
		return fmt.Errorf("streams: inline bytes %d: must leave %d bytes of the max message size %d for the record around it", c.InlineBytes, entrySlack, c.MaxMsgSize)
	case c.MaxPayloadBytes < int64(c.InlineBytes):
		return fmt.Errorf("streams: max payload %d: must be at least the inline bytes %d", c.MaxPayloadBytes, c.InlineBytes)
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
	// Timers holds message schedules (durable timers) and what they fire,
	// and the index of parked signal waits: nodes alone write there, since
	// schedules need roll-ups, which a publisher could turn on the stream.
	Timers
	// Live keeps the live events of running turns for a while, so a
	// watcher that reconnects reads what it missed: derived, never truth.
	Live
	// Agents holds agent definitions, written by operators. Streams added
	// after the first are missing on deployments made before them until a
	// node of a version that has them starts (Ensure).
	Agents
	numStreams
)

var streamSuffix = [numStreams]string{"SESSIONS", "EFFECTS", "PROCESSES", "TRIGGERS", "TIMERS", "LIVE", "AGENTS"}

// addedLater are the streams a deployment may lack: made after its first
// nodes, or (LIVE) lost with a server in memory.
func addedLater(s Stream) bool { return s == Live || s == Agents }

// Names of the deployment's streams and buckets.
// StreamName is the name of one of the deployment's streams.
func (c Config) StreamName(s Stream) string { return c.withDefaults().streamName(s) }

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
	return map[string]string{metaSchema: strconv.Itoa(SchemaVersion), metaPrefix: c.Prefix,
		metaInline: strconv.Itoa(c.InlineBytes), metaMaxPayload: strconv.FormatInt(c.MaxPayloadBytes, 10)}
}

func (c Config) streamConfig(s Stream) jetstream.StreamConfig {
	p := c.Prefix
	subjects := map[Stream][]string{
		Sessions:  {p + ".sess.>"},
		Effects:   {p + ".fx.>"},
		Processes: {p + ".proc.>"},
		Triggers:  {p + ".signal.>", p + ".trig.>"},
		Timers:    {p + ".timer.>"},
		Live:      {p + ".live.>"},
		Agents:    {p + ".agent.>"},
	}[s]
	// No stream of lash's truth expires by age: what is garbage is removed
	// when it becomes garbage (package lifecycle), and nothing live can
	// lapse (a parked call's journal, a fired timer no node has taken).
	var maxAge time.Duration
	maxMsgSize := c.MaxMsgSize
	if s == Sessions {
		maxMsgSize = c.MaxInputBytes
	}
	cfg := jetstream.StreamConfig{
		Name:       c.streamName(s),
		MaxAge:     maxAge,
		Subjects:   subjects,
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardOld,
		Replicas:   c.Replicas,
		Duplicates: c.DuplicateWindow,
		MaxMsgSize: maxMsgSize,
		// Reads after a conflict must see the leader's state, and a direct
		// get may be answered by a lagging follower: only a single
		// server, which is the leader, answers the reads of the session
		// and process streams directly (ADR 0033).
		AllowDirect:        (s == Sessions || s == Processes) && c.Replicas == 1,
		AllowAtomicPublish: true,
		Metadata:           c.metadata(),
	}
	if s == Timers {
		// Schedules need roll-ups (the server rolls a schedule's subject
		// up) and fire messages with a TTL.
		cfg.AllowAtomicPublish = false
		cfg.AllowMsgSchedules, cfg.AllowMsgTTL, cfg.AllowRollup = true, true, true
	}
	if s == Live {
		// Bounded by age and bytes, in memory unless asked: events are
		// published without waiting for the stream, and losing them loses
		// no truth. No dedupe: nothing publishes them twice on purpose.
		cfg.MaxAge, cfg.MaxBytes, cfg.MaxMsgSize = c.LiveRetention, c.LiveMaxBytes, c.MaxMsgSize
		cfg.MaxConsumers = MaxLiveConsumers
		cfg.Duplicates, cfg.AllowAtomicPublish = min(c.DuplicateWindow, c.LiveRetention), false
		if !c.LiveFile {
			cfg.Storage = jetstream.MemoryStorage
		}
	}
	return cfg
}

// leaseStreamConfig is the lease bucket's stream, laid out as the KV API
// lays out a bucket but without direct gets: a lease decision read from a
// lagging follower could miss a fresh renewal or liveness beat.
func (c Config) leaseStreamConfig() jetstream.StreamConfig {
	b := c.leaseBucket()
	return jetstream.StreamConfig{
		Name:                   "KV_" + b,
		Description:            "lash leases and node liveness",
		Subjects:               []string{"$KV." + b + ".>"},
		Storage:                jetstream.FileStorage,
		Retention:              jetstream.LimitsPolicy,
		Discard:                jetstream.DiscardNew,
		Replicas:               c.Replicas,
		MaxMsgsPerSubject:      1,
		MaxMsgs:                -1,
		MaxBytes:               -1,
		MaxMsgSize:             -1,
		MaxConsumers:           -1,
		Duplicates:             DefaultDuplicateWindow,
		AllowRollup:            true,
		DenyDelete:             true,
		AllowDirect:            false,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: leaseMarkerTTL,
		Metadata:               c.metadata(),
	}
}

// Ensure creates the streams and buckets that are missing and checks those
// that exist. A difference in anything this build relies on is refused with
// a *SchemaError; nothing existing is ever changed.
func (c *Client) Ensure(ctx context.Context) error {
	for s := Stream(0); s < numStreams; s++ {
		want := c.cfg.streamConfig(s)
		if err := c.ensureStream(ctx, want); err != nil {
			return fmt.Errorf("streams: ensure %s: %w", want.Name, err)
		}
		st, err := c.js.Stream(ctx, want.Name)
		if err != nil {
			return fmt.Errorf("streams: ensure %s: %w", want.Name, err)
		}
		c.mu.Lock()
		c.streams[s] = st
		c.mu.Unlock()
	}
	want := c.cfg.leaseStreamConfig()
	if err := c.ensureStream(ctx, want); err != nil {
		return fmt.Errorf("streams: ensure bucket %s: %w", c.cfg.leaseBucket(), err)
	}
	kv, err := c.js.KeyValue(ctx, c.cfg.leaseBucket())
	if err != nil {
		return fmt.Errorf("streams: bind bucket %s: %w", c.cfg.leaseBucket(), err)
	}
	st, err := c.js.Stream(ctx, want.Name)
	if err != nil {
		return fmt.Errorf("streams: bind bucket %s: %w", c.cfg.leaseBucket(), err)
	}
	c.leases, c.leaseStream = kv, st
	blobs := c.cfg.blobStreamConfig()
	if err := c.ensureStream(ctx, blobs); err != nil {
		return fmt.Errorf("streams: ensure object store %s: %w", c.cfg.blobBucket(), err)
	}
	return c.bindBlobs(ctx)
}

// EnsureLive makes the LIVE stream again if it is missing (kept in memory,
// it is lost when its server restarts) and reports whether it did. A node
// calls it now and then: watchers and lash-admin find it back within
// seconds, and no node has to restart.
func (c *Client) EnsureLive(ctx context.Context) (bool, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	want := c.cfg.streamConfig(Live)
	if _, err := c.js.Stream(ctx, want.Name); err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, err
	}
	if err := c.ensureStream(ctx, want); err != nil {
		return false, fmt.Errorf("streams: ensure %s: %w", want.Name, err)
	}
	st, err := c.js.Stream(ctx, want.Name)
	if err != nil {
		return false, fmt.Errorf("streams: ensure %s: %w", want.Name, err)
	}
	c.mu.Lock()
	c.streams[Live] = st
	c.mu.Unlock()
	return true, nil
}

// bindBlobs binds the object store whose stream exists.
func (c *Client) bindBlobs(ctx context.Context) error {
	name := c.cfg.blobBucket()
	obs, err := c.js.ObjectStore(ctx, name)
	if err != nil {
		return fmt.Errorf("streams: bind object store %s: %w", name, err)
	}
	st, err := c.js.Stream(ctx, "OBJ_"+name)
	if err != nil {
		return fmt.Errorf("streams: bind object store %s: %w", name, err)
	}
	c.blobs, c.blobStream = obs, st
	return nil
}

// ensureStream creates want, or checks the stream of that name against it.
// The LIVE stream's age and size limits are operational, not rules
// anything relies on: a node brings them to its settings.
func (c *Client) ensureStream(ctx context.Context, want jetstream.StreamConfig) error {
	_, err := c.js.CreateStream(ctx, want)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		var st jetstream.Stream
		if st, err = c.js.Stream(ctx, want.Name); err != nil {
			return err
		}
		got := st.CachedInfo().Config
		if want.Name == c.cfg.streamName(Effects) && got.MaxAge > 0 && want.MaxAge == 0 {
			// Made by a version whose journal expired after a week: its
			// records now stay until the sweep removes them.
			got.MaxAge = 0
			if _, err := c.js.UpdateStream(ctx, got); err != nil {
				return err
			}
		}
		if want.Name == c.cfg.streamName(Live) && (got.MaxAge != want.MaxAge || got.MaxBytes != want.MaxBytes || got.MaxConsumers != want.MaxConsumers) &&
			got.Storage == want.Storage {
			got.MaxAge, got.MaxBytes, got.MaxConsumers = want.MaxAge, want.MaxBytes, want.MaxConsumers
			if _, err := c.js.UpdateStream(ctx, got); err != nil {
				return err
			}
		}
		err = compareStream(want, got)
	}
	return err
}

// compareStream checks the fields whose meaning the write rules depend on.
// Limits of zero or below all mean "unlimited".
func compareStream(want, got jetstream.StreamConfig) error {
	if w, g := want.Metadata[metaSchema], got.Metadata[metaSchema]; w != g {
		if g == "" {
			g = "absent"
		}
		return &SchemaError{Stream: want.Name, Field: "schema version", Want: w, Got: g}
	}
	if want.AllowDirect && !got.AllowDirect {
		// A stream made before direct gets were allowed reads through
		// the API: slower, as fresh.
		got.AllowDirect = true
	}
	limit := func(n int64) string {
		if n <= 0 {
			return "unlimited"
		}
		return strconv.FormatInt(n, 10)
	}
	fields := []struct {
		name      string
		want, got any
	}{
		{"subjects", want.Subjects, got.Subjects},
		{"storage", want.Storage, got.Storage},
		{"retention", want.Retention, got.Retention},
		{"discard policy", want.Discard, got.Discard},
		{"replicas", want.Replicas, got.Replicas},
		{"atomic publish", want.AllowAtomicPublish, got.AllowAtomicPublish},
		{"direct get", want.AllowDirect, got.AllowDirect},
		{"message TTL", want.AllowMsgTTL, got.AllowMsgTTL},
		{"message schedules", want.AllowMsgSchedules, got.AllowMsgSchedules},
		{"limit marker TTL", want.SubjectDeleteMarkerTTL, got.SubjectDeleteMarkerTTL},
		{"duplicate window", want.Duplicates, got.Duplicates},
		{"max message size", limit(int64(want.MaxMsgSize)), limit(int64(got.MaxMsgSize))},
		{"max age", want.MaxAge, got.MaxAge},
		{"max messages", limit(want.MaxMsgs), limit(got.MaxMsgs)},
		{"max bytes", limit(want.MaxBytes), limit(got.MaxBytes)},
		{"messages per subject", limit(want.MaxMsgsPerSubject), limit(got.MaxMsgsPerSubject)},
	}
	for _, f := range fields {
		if w, g := fmt.Sprint(f.want), fmt.Sprint(f.got); w != g {
			return &SchemaError{Stream: want.Name, Field: f.name, Want: w, Got: g}
		}
	}
	for _, k := range []string{metaInline, metaMaxPayload} {
		if w, g := want.Metadata[k], got.Metadata[k]; w != g {
			return &SchemaError{Stream: want.Name, Field: k, Want: w, Got: g}
		}
	}
	return nil
}
