package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/triggers"
	"github.com/nats-io/nats.go/jetstream"
)

// Boot times a node's start on a deployment where small, then large,
// background tool calls and as many trigger deliveries ran, ended and were
// pruned (a sweep with no retention), each deployment under a prefix of its
// own on the same server: from lash.Open until a new process and a new
// delivery have run through its worker and router and its read models
// caught up, and the heap it holds then (medians of bootSamples). What was pruned should cost
// nothing: the large deployment's figures are given as ratios to the
// small one's.
func Boot(ctx context.Context, e *Env, small, large int) ([]Result, error) {
	// The node's heap is told apart from the embedded server's by the
	// sampled heap profile: sample finely enough for a figure of a MiB.
	runtime.MemProfileRate = 4096
	sizes := [2]int{small, large}
	for _, n := range sizes {
		if err := bootLoad(ctx, e, bootPrefix(n), n); err != nil {
			return nil, err
		}
	}
	// Right after a load the server is still forgetting its message ids
	// (the duplicate window) and the released leases' markers (their
	// TTLs, shorter): boots timed then would pay for the load, not for
	// what it left.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(streams.DefaultDuplicateWindow):
	}
	// A boot takes tens of milliseconds: the median of a few, the two
	// deployments' samples taken in turn so that whatever else the
	// machine does falls on both alike.
	var times [2][]time.Duration
	var nodes, servers [2][]int64
	for k := range bootSamples {
		for i, n := range sizes {
			t, h, err := bootOnce(ctx, e, bootPrefix(n), k)
			if err != nil {
				return nil, err
			}
			times[i], nodes[i], servers[i] = append(times[i], t), append(nodes[i], h[0]), append(servers[i], h[1])
		}
	}
	var took [2]time.Duration
	var held [2][2]int64 // [small, large][node, server]
	for i := range sizes {
		slices.Sort(nodes[i])
		slices.Sort(servers[i])
		took[i], held[i] = median(times[i]), [2]int64{nodes[i][bootSamples/2], servers[i][bootSamples/2]}
	}
	note := fmt.Sprintf("from lash.Open until a new process and a new delivery ran and the read models caught up; floor: the same with %d pruned", small)
	return []Result{
		{Name: fmt.Sprintf("boot after %d pruned (%s)", large, e.Mode()), Value: ms(took[1]), Unit: "ms", Floor: ms(took[0]),
			Ratio: float64(took[1]) / float64(took[0]), Note: note},
		{Name: fmt.Sprintf("heap after boot, %d pruned (%s)", large, e.Mode()), Value: mib(held[1][0]), Unit: "MiB",
			Floor: mib(held[0][0]), Ratio: float64(held[1][0]) / float64(max(held[0][0], 1)),
			Note: fmt.Sprintf("heap the node allocated and holds once booted, the embedded server's apart (%.2f MiB, against %.2f with %d pruned: its block caches and the last writes' ids, which age out); floor: the same with %d pruned",
				mib(held[1][1]), mib(held[0][1]), small, small)},
	}, nil
}

const bootSamples = 5

func bootPrefix(n int) string { return fmt.Sprintf("boot%d", n) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// bootLoad runs n background calls and n trigger deliveries to their end
// on a node of the deployment with prefix, then sweeps until nothing is
// left to prune.
func bootLoad(ctx context.Context, e *Env, prefix string, n int) error {
	dir, err := os.MkdirTemp(e.dir, "boot-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	node, nc, err := e.node("load", loopScript(0), lash.WithStreams(streams.Config{Prefix: prefix, Replicas: e.Replicas}),
		lash.WithProjection(dir), lash.WithConcurrency(64))
	if err != nil {
		return err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	stop := runLoops(ctx, node)
	defer stop()
	if _, err := node.Triggers().Apply(ctx, bootSubscription(), nil); err != nil {
		return err
	}
	r := node.Processes()
	reg := processes.Registration{Input: processes.Input{Kind: processes.ToolCall, Tool: "echo", Args: json.RawMessage(`{}`)},
		Disposition: processes.Rerunnable, Provenance: processes.Provenance{Host: "bench"}}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = sixteen(0, n, func(i int) error {
		if _, _, err := r.Register(ctx, fmt.Sprintf("load-%d", i), reg); err != nil {
			return err
		}
		_, err := js.Publish(ctx, fmt.Sprintf("%s.signal.boot.%d", prefix, i), []byte(`{}`))
		return err
	})
	if err != nil {
		return err
	}
	// Every process ends: the n registered and the n the deliveries start.
	err = sixteen(0, n, func(i int) error {
		_, err := r.Await(ctx, fmt.Sprintf("load-%d", i))
		return err
	})
	if err != nil {
		return err
	}
	for {
		ds, err := node.Triggers().Deliveries(ctx)
		if err != nil {
			return err
		}
		started := 0
		for _, d := range ds {
			if d.Started {
				started++
			}
		}
		if started == n {
			err = sixteen(0, n, func(i int) error {
				_, err := r.Await(ctx, ds[i].Process)
				return err
			})
			if err != nil {
				return err
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Sweep with no retention, an hour on, until nothing is left.
	cfg := lifecycle.SweepConfig{Retention: time.Nanosecond, MarkTTL: time.Nanosecond, Grace: time.Nanosecond,
		Now: func() time.Time { return time.Now().Add(time.Hour) }}
	for range 5 {
		out, err := lifecycle.Sweep(ctx, node.Streams(), cfg)
		if err != nil {
			return err
		}
		if out.Processes == 0 && out.Occurrences == 0 && out.Marks == 0 {
			return nil
		}
	}
	return errors.New("boot: sweeps kept finding more to prune")
}

// bootOnce starts a node on the deployment with prefix and times it until
// its worker ran a new process, its router a new delivery, and its read
// models caught up; it returns that and the heap the node holds then.
func bootOnce(ctx context.Context, e *Env, prefix string, sample int) (time.Duration, [2]int64, error) {
	dir, err := os.MkdirTemp(e.dir, "boot-")
	if err != nil {
		return 0, [2]int64{}, err
	}
	defer os.RemoveAll(dir)
	var before [2]int64
	before[0], before[1] = heapApart()
	start := time.Now()
	node, nc, err := e.node("boot", loopScript(0), lash.WithStreams(streams.Config{Prefix: prefix, Replicas: e.Replicas}),
		lash.WithProjection(dir))
	if err != nil {
		return 0, [2]int64{}, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	stop := runLoops(ctx, node)
	defer stop()
	r := node.Processes()
	reg := processes.Registration{Input: processes.Input{Kind: processes.ToolCall, Tool: "echo", Args: json.RawMessage(`{}`)},
		Disposition: processes.Rerunnable, Provenance: processes.Provenance{Host: "bench"}}
	fresh := fmt.Sprintf("fresh-%d", sample)
	if _, _, err := r.Register(ctx, fresh, reg); err != nil {
		return 0, [2]int64{}, err
	}
	if _, err := r.Await(ctx, fresh); err != nil {
		return 0, [2]int64{}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, [2]int64{}, err
	}
	if _, err := js.Publish(ctx, prefix+".signal.boot."+fresh, []byte(`{}`)); err != nil {
		return 0, [2]int64{}, err
	}
	for {
		ds, err := node.Triggers().Deliveries(ctx)
		if err != nil {
			return 0, [2]int64{}, err
		}
		// This boot's delivery, after one from each earlier sample.
		started := 0
		for _, d := range ds {
			if d.Started {
				started++
			}
		}
		if len(ds) == sample+1 && started == len(ds) {
			for _, d := range ds {
				if _, err := r.Await(ctx, d.Process); err != nil {
					return 0, [2]int64{}, err
				}
			}
			break
		}
		select {
		case <-ctx.Done():
			return 0, [2]int64{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	// The node tails its read models itself: wait for them to fold what is stored.
	for stream, p := range map[streams.Stream]*projector.Projector{streams.Sessions: node.Projection(), streams.Processes: node.ProcessProjection()} {
		last, err := node.Streams().LastSeq(ctx, stream)
		if err != nil {
			return 0, [2]int64{}, err
		}
		if err := p.WaitFor(ctx, last); err != nil {
			return 0, [2]int64{}, err
		}
	}
	took := time.Since(start)
	nodeAfter, serverAfter := heapApart()
	held := [2]int64{nodeAfter - before[0], serverAfter - before[1]}
	if dir := os.Getenv("LASH_BOOT_HEAP_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, prefix+".heap"))
		if err != nil {
			return 0, [2]int64{}, err
		}
		defer f.Close()
		if err := pprof.WriteHeapProfile(f); err != nil {
			return took, held, err
		}
	}
	return took, held, nil
}

func bootSubscription() triggers.Op {
	return triggers.Op{ID: "boot-sub", Action: triggers.ActRegister, Owner: triggers.Owner{Kind: triggers.Host}, Key: "boot",
		Spec: &triggers.Spec{SourceType: "boot", SourceKey: ">",
			Start: triggers.Target{Kind: processes.ToolCall, Tool: "echo", Args: json.RawMessage(`{}`), PayloadArg: "-"}}}
}

// runLoops runs the node's process worker and its waker (the trigger
// router) until the returned stop is called.
func runLoops(ctx context.Context, node *lash.Node) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = node.RunProcesses(ctx); done <- struct{}{} }()
	go func() { _ = node.Wake(ctx); done <- struct{}{} }()
	return func() { cancel(); <-done; <-done }
}
