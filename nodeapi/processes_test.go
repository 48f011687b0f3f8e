package nodeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
)

// Processes through the API: a background tool started, awaited, started
// again (idempotent) and refused with other content; external work awaited
// past a timeout and cancelled; bad requests change nothing.
func TestProcessEndpoints(t *testing.T) {
	r := newAPIRig(t, "node-a", nil)
	ctx := r.ctx
	echo, err := tools.Func("echo", "say it back", func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		return a.Text, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.node.Tools().Register(echo); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.node.RunProcesses(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	start := nodeapi.ProcessStartRequest{ID: "p1", Tool: "echo", Args: json.RawMessage(`{"text":"hi"}`)}
	info, err := r.client.ProcessStart(ctx, start)
	if err != nil || !info.Created || info.Kind != "tool_call" || info.Disposition != "rerunnable" {
		t.Fatalf("start: %+v, %v", info, err)
	}
	info, err = r.client.ProcessAwait(ctx, "p1", 20*time.Second)
	if err != nil || !info.Ended || info.Status != "completed" || string(info.Outcome) != `"hi"` || info.Attempts != 1 {
		t.Fatalf("await: %+v, %v", info, err)
	}
	info, err = r.client.ProcessStart(ctx, start)
	if err != nil || info.Created || info.Status != "completed" {
		t.Fatalf("start again: %+v, %v; want the process as it stands", info, err)
	}
	other := start
	other.Args = json.RawMessage(`{"text":"bye"}`)
	if _, err := r.client.ProcessStart(ctx, other); !errors.Is(err, nodeapi.ErrBusy) {
		t.Fatalf("start with other content: %v, want 409", err)
	}

	if _, err := r.client.ProcessStart(ctx, nodeapi.ProcessStartRequest{ID: "job", ExternalRef: "ci-7"}); err != nil {
		t.Fatal(err)
	}
	info, err = r.client.ProcessAwait(ctx, "job", 200*time.Millisecond)
	if err != nil || info.Ended || info.Status != "pending" || info.Disposition != "externally_owned" {
		t.Fatalf("await past its timeout: %+v, %v; want it answered open", info, err)
	}
	if info, err = r.client.ProcessCancel(ctx, "job", "withdrawn"); err != nil || info.Events != 2 {
		t.Fatalf("cancel: %+v, %v", info, err)
	}

	before, err := r.node.Streams().LastSeq(ctx, streams.Processes)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  nodeapi.ProcessStartRequest
		want error
	}{
		{nodeapi.ProcessStartRequest{Tool: "echo"}, nodeapi.ErrBadRequest},
		{nodeapi.ProcessStartRequest{ID: "p2"}, nodeapi.ErrBadRequest},
		{nodeapi.ProcessStartRequest{ID: "p2", Tool: "nope"}, nodeapi.ErrBadRequest},
		{nodeapi.ProcessStartRequest{ID: "p2", Tool: "echo", ExternalRef: "x"}, nodeapi.ErrBadRequest},
		{nodeapi.ProcessStartRequest{ID: "p2", Tool: "echo", Disposition: "whenever"}, nodeapi.ErrBadRequest},
	} {
		if _, err := r.client.ProcessStart(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("start %+v: %v, want %v", c.req, err, c.want)
		}
	}
	if _, err := r.client.Do(ctx, nodeapi.EndpointProcessStart, []byte(`{"id":"p2","tool":"echo","args":[1,}`)); !errors.Is(err, nodeapi.ErrBadRequest) {
		t.Errorf("start with arguments that are not JSON: %v, want 400", err)
	}
	if _, err := r.client.ProcessStatus(ctx, "nobody"); !errors.Is(err, nodeapi.ErrNotFound) {
		t.Errorf("status of an unknown process: %v, want 404", err)
	}
	if _, err := r.client.ProcessCancel(ctx, "p1", ""); !errors.Is(err, nodeapi.ErrBusy) {
		t.Errorf("cancel of an ended process: %v, want 409", err)
	}
	after, err := r.node.Streams().LastSeq(ctx, streams.Processes)
	if err != nil || after != before {
		t.Fatalf("bad requests changed the PROCESSES stream: %d -> %d, %v", before, after, err)
	}
}
