package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lash-run/lash/streams"
)

var streamsCmd = &command{
	name:    "streams",
	summary: "the deployment's streams, lease bucket and schema version",
	doc: `Lists the deployment's streams and the lease bucket's stream, each with its subjects,
messages, bytes, replicas and the schema version in its metadata (and its leader, for
replicated streams), then the deployment's schema version next to the one this build expects.`,
	run: runStreams,
}

type streamJSON struct {
	Name          string    `json:"name"`
	Bucket        string    `json:"bucket"`
	Subjects      []string  `json:"subjects"`
	Messages      uint64    `json:"messages"`
	Bytes         uint64    `json:"bytes"`
	FirstSeq      uint64    `json:"first_seq"`
	LastSeq       uint64    `json:"last_seq"`
	Consumers     int       `json:"consumers"`
	Replicas      int       `json:"replicas"`
	Leader        string    `json:"leader"`
	Created       time.Time `json:"created"`
	SchemaVersion string    `json:"schema_version"`
	// Missing: not on the server (LIVE, in memory, after its server
	// restarted, until a node makes it again).
	Missing bool `json:"missing,omitempty"`
}

type streamsJSON struct {
	Prefix string `json:"prefix"`
	// SchemaVersion is the deployment's (its streams agree, or lash could
	// not have opened them); BuildSchemaVersion this build's.
	SchemaVersion      string       `json:"schema_version"`
	BuildSchemaVersion string       `json:"build_schema_version"`
	LeaseBucket        string       `json:"lease_bucket"`
	Streams            []streamJSON `json:"streams"`
}

func runStreams(a *app, _ []string) error {
	infos, err := a.client.Info(a.ctx)
	if err != nil {
		return err
	}
	out := streamsJSON{Prefix: a.client.Config().Prefix, BuildSchemaVersion: strconv.Itoa(streams.SchemaVersion),
		LeaseBucket: a.client.LeaseBucket(), Streams: []streamJSON{}}
	cluster := false
	for _, si := range infos {
		if si.Missing {
			out.Streams = append(out.Streams, streamJSON{Name: si.Name, Subjects: []string{}, Missing: true})
			continue
		}
		if out.SchemaVersion == "" {
			out.SchemaVersion = si.Schema
		} else if si.Schema != out.SchemaVersion {
			out.SchemaVersion = "mixed"
		}
		cluster = cluster || si.Replicas > 1
		out.Streams = append(out.Streams, streamJSON{Name: si.Name, Bucket: si.Bucket, Subjects: append([]string{}, si.Subjects...),
			Messages: si.Messages, Bytes: si.Bytes, FirstSeq: si.FirstSeq, LastSeq: si.LastSeq, Consumers: si.Consumers,
			Replicas: si.Replicas, Leader: si.Leader, Created: utc(si.Created), SchemaVersion: si.Schema})
	}
	return a.emit(out, func(w io.Writer) {
		head := []any{"STREAM", "SUBJECTS", "MESSAGES", "BYTES", "REPLICAS", "SCHEMA"}
		if cluster {
			head = append(head, "LEADER")
		}
		row(w, head...)
		for _, s := range out.Streams {
			name := s.Name
			if s.Bucket != "" {
				name += " (bucket " + s.Bucket + ")"
			}
			cells := []any{name, strings.Join(s.Subjects, " "), s.Messages, bytesOf(s.Bytes), s.Replicas, s.SchemaVersion}
			if s.Missing {
				cells = []any{name, "(missing: a node makes it again)", "-", "-", "-", "-"}
			}
			if cluster {
				cells = append(cells, s.Leader)
			}
			row(w, cells...)
		}
		fmt.Fprintf(w, "\nlease bucket %s; schema version %s (this build expects %s)\n", out.LeaseBucket, out.SchemaVersion, out.BuildSchemaVersion)
	})
}

// bytesOf is a byte count for people.
func bytesOf(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
