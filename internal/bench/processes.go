package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lash-run/lash/processes"
)

// Processes times a background tool call on a node that runs processes,
// from its registration until an awaiter reads its end, and an await of a
// process that has ended, each against a raw CAS publish timed between the
// samples.
func Processes(ctx context.Context, e *Env, n int) ([]Result, error) {
	node, nc, err := e.node("procs", loopScript(0))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- node.RunProcesses(wctx) }()
	defer func() { stop(); <-done }()
	r := node.Processes()
	reg := processes.Registration{Input: processes.Input{Kind: processes.ToolCall, Tool: "echo", Args: json.RawMessage(`{}`)},
		Disposition: processes.Rerunnable, Provenance: processes.Provenance{Host: "bench"}}
	var round, await, cas []time.Duration
	for i := range n + 3 { // three to warm up
		id := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		if _, _, err := r.Register(ctx, id, reg); err != nil {
			return nil, err
		}
		p, err := r.Await(ctx, id)
		if err != nil {
			return nil, err
		}
		took := time.Since(start)
		if p.Status() != processes.Completed {
			return nil, fmt.Errorf("processes: %s ended %s", id, p.Status())
		}
		start = time.Now()
		if _, err := r.Await(ctx, id); err != nil {
			return nil, err
		}
		again := time.Since(start)
		if i >= 3 {
			round, await = append(round, took), append(await, again)
			more, err := e.CAS(ctx, 2)
			if err != nil {
				return nil, err
			}
			cas = append(cas, more...)
		}
	}
	floor := median(cas)
	return []Result{
		{Name: "process start to end read (" + e.Mode() + ")", Value: ms(median(round)), Unit: "ms", Floor: ms(floor), Ratio: float64(median(round)) / float64(floor),
			Note: "register with attempt 1 started (one write), the node's worker runs echo, completes (one write), tells the awaiter; floor: one CAS publish"},
		{Name: "await of an ended process (" + e.Mode() + ")", Value: ms(median(await)), Unit: "ms", Floor: ms(floor), Ratio: float64(median(await)) / float64(floor),
			Note: "one batched direct get of its events; floor: one CAS publish"},
	}, nil
}
