package streams_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lash-run/lash/streams"
)

func TestInfo(t *testing.T) {
	ctx := context.Background()
	c := open(t, streams.Config{Prefix: "inf"})
	in, _ := c.Subjects().SessionInputs("s1")
	for i := range 3 {
		if _, _, err := c.Publish(ctx, streams.Publication{Subject: in, Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.KVCreate(ctx, "sess.s1", []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	infos, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, si := range infos {
		got = append(got, fmt.Sprintf("%s %v bucket=%q msgs=%d last=%d r=%d schema=%s",
			si.Name, si.Subjects, si.Bucket, si.Messages, si.LastSeq, si.Replicas, si.Schema))
		if si.Created.IsZero() {
			t.Errorf("%s: no creation time", si.Name)
		}
	}
	schema := strconv.Itoa(streams.SchemaVersion)
	want := []string{
		"INF_SESSIONS [inf.sess.>] bucket=\"\" msgs=3 last=3 r=1 schema=" + schema,
		"INF_EFFECTS [inf.fx.>] bucket=\"\" msgs=0 last=0 r=1 schema=" + schema,
		"INF_PROCESSES [inf.proc.>] bucket=\"\" msgs=0 last=0 r=1 schema=" + schema,
		"INF_TRIGGERS [inf.signal.> inf.trig.>] bucket=\"\" msgs=0 last=0 r=1 schema=" + schema,
		"INF_TIMERS [inf.timer.>] bucket=\"\" msgs=0 last=0 r=1 schema=" + schema,
		"INF_LIVE [inf.live.>] bucket=\"\" msgs=0 last=0 r=1 schema=" + schema,
		"INF_AGENTS [inf.agent.>] bucket=\"\" msgs=0 last=0 r=1 schema=" + schema,
		"KV_INF_LEASES [$KV.INF_LEASES.>] bucket=\"INF_LEASES\" msgs=1 last=1 r=1 schema=" + schema,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("info:\n%q\nwant:\n%q", got, want)
	}
	if infos[0].Bytes == 0 {
		t.Fatal("no bytes counted")
	}
	// The creation time names the stream: the same on every read.
	again, err := c.Info(ctx)
	if err != nil || !again[0].Created.Equal(infos[0].Created) {
		t.Fatalf("second read: %v %v", again, err)
	}
}
