package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/streams"
)

// Storage is what a deployment stores, by stream and by kind.
type Storage struct {
	Streams []StreamUse `json:"streams"`
	// Kinds are the messages of each kind of record, by stream.
	Kinds []KindUse `json:"kinds"`
	// Objects are the object store's objects by kind ("record", "body",
	// "snapshot", "shared" for the deployment's own and older ones).
	Objects []KindUse `json:"objects"`
	// Sessions are the sessions holding the most: messages on their
	// subjects (log, inputs, snapshots, journal) and the bytes of the
	// objects they own.
	Sessions []SessionUse `json:"sessions"`
}

// StreamUse is one stream's size.
type StreamUse struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	Missing  bool   `json:"missing,omitempty"`
}

// KindUse counts one kind of record.
type KindUse struct {
	Stream   string `json:"stream,omitempty"`
	Kind     string `json:"kind"`
	Messages uint64 `json:"messages"`
	Bytes    int64  `json:"bytes,omitempty"`
}

// SessionUse is what one session holds.
type SessionUse struct {
	Session     string `json:"session"`
	Messages    uint64 `json:"messages"`
	ObjectBytes int64  `json:"object_bytes"`
}

// MaxSessionsReported bounds Storage.Sessions.
const MaxSessionsReported = 10

// Report reads what the deployment stores (ADR 0035): the streams' sizes,
// the messages of each kind of record (no payload is read), the objects by
// kind, and the sessions holding the most.
func Report(ctx context.Context, c *streams.Client) (*Storage, error) {
	out := &Storage{Streams: []StreamUse{}, Kinds: []KindUse{}, Objects: []KindUse{}, Sessions: []SessionUse{}}
	infos, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	for _, si := range infos {
		out.Streams = append(out.Streams, StreamUse{Name: si.Name, Messages: si.Messages, Bytes: si.Bytes, Missing: si.Missing})
	}
	p := c.Config().Prefix + "."
	kinds := []struct {
		stream streams.Stream
		kind   string
		filter string
	}{
		{streams.Sessions, "log", p + "sess.*.ev"},
		{streams.Sessions, "inputs", p + "sess.*.in"},
		{streams.Sessions, "decisions", p + "sess.*.decide"},
		{streams.Sessions, "snapshots", p + "sess.*.snap"},
		{streams.Sessions, "deletion marks", p + "sess.*.gone"},
		{streams.Effects, "records", p + "fx.*.*.*.*.r"},
		{streams.Effects, "intents", p + "fx.*.*.*.*.i"},
		{streams.Effects, "steps", p + "fx.*.steps.*.*"},
		{streams.Processes, "process logs", p + "proc.*.ev"},
		{streams.Processes, "prune marks", p + "proc.*.gone"},
		{streams.Processes, "sub-agent budgets", p + "proc.*.tree"},
		{streams.Triggers, "signals", p + "signal.>"},
		{streams.Triggers, "subscriptions", p + "trig.sub.*"},
		{streams.Triggers, "receipts", p + "trig.op.*"},
		{streams.Triggers, "occurrences", p + "trig.occ.*"},
		{streams.Triggers, "deliveries", p + "trig.dlv.*"},
		{streams.Triggers, "event resolutions", p + "trig.res.*"},
		{streams.Triggers, "event waits", p + "trig.await.*"},
		{streams.Timers, "schedules", p + "timer.at.>"},
		{streams.Timers, "fired timers", p + "timer.due.>"},
		{streams.Timers, "signal waits", p + "timer.wait.>"},
		{streams.Agents, "agent definitions", p + "agent.*"},
	}
	sessions := map[string]*SessionUse{}
	session := func(id string) *SessionUse {
		s := sessions[id]
		if s == nil {
			s = &SessionUse{Session: id}
			sessions[id] = s
		}
		return s
	}
	for _, k := range kinds {
		counts, err := c.SubjectCounts(ctx, k.stream, k.filter)
		if errors.Is(err, streams.ErrStreamMissing) {
			continue // a stream newer than the deployment's nodes
		}
		if err != nil {
			return nil, err
		}
		var n uint64
		for subj, m := range counts {
			n += m
			if id, ok := sessionOf(c, k.stream, subj); ok {
				session(id).Messages += m
			}
		}
		out.Kinds = append(out.Kinds, KindUse{Stream: c.StreamName(k.stream), Kind: k.kind, Messages: n})
	}
	objects := map[string]*KindUse{}
	err = c.Objects(ctx, func(o streams.ObjectInfo) error {
		kind := "shared"
		owner, ok := blobs.OwnerOf(o.Metadata)
		if ok {
			kind = owner.Kind
			if kind != blobs.KindProgram { // owned by a name, not a session
				session(owner.Session).ObjectBytes += o.Size
			}
		}
		k := objects[kind]
		if k == nil {
			k = &KindUse{Kind: kind}
			objects[kind] = k
		}
		k.Messages++
		k.Bytes += o.Size
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, k := range objects {
		out.Objects = append(out.Objects, *k)
	}
	slices.SortFunc(out.Objects, func(a, b KindUse) int { return cmp.Compare(a.Kind, b.Kind) })
	for _, s := range sessions {
		out.Sessions = append(out.Sessions, *s)
	}
	slices.SortFunc(out.Sessions, func(a, b SessionUse) int {
		return cmp.Or(cmp.Compare(b.ObjectBytes, a.ObjectBytes), cmp.Compare(b.Messages, a.Messages), cmp.Compare(a.Session, b.Session))
	})
	out.Sessions = out.Sessions[:min(len(out.Sessions), MaxSessionsReported)]
	return out, nil
}

// sessionOf names the session a session or journal subject belongs to.
func sessionOf(c *streams.Client, s streams.Stream, subject string) (string, bool) {
	var rest string
	switch s {
	case streams.Sessions:
		rest = strings.TrimPrefix(subject, c.Config().Prefix+".sess.")
	case streams.Effects:
		rest = strings.TrimPrefix(subject, c.Config().Prefix+".fx.")
	default:
		return "", false
	}
	tok, _, _ := strings.Cut(rest, ".")
	id, err := streams.ParseToken(tok)
	return id, err == nil && id != HostScope
}
