package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"

	"github.com/lash-run/lash"
)

// MemoryPerSession runs one turn on each of n new sessions and returns
// how much more memory the process holds after them, per session: the
// embedded server's state of the sessions' subjects and whatever the node
// keeps, with the node keeping no folded states (so what remains is the
// server's). The server keeps a session's log, input and snapshot subjects
// for as long as the stream keeps them (for ever), its journal subjects for
// the journal retention.
func MemoryPerSession(ctx context.Context, e *Env, n int) (Result, error) {
	node, nc, err := e.node("memory", loopScript(0), lash.WithStateCache(1, 1<<20), lash.WithConcurrency(16))
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	// A first turn creates what every session shares.
	if err := memTurn(ctx, node, "warm"); err != nil {
		return Result{}, err
	}
	before := heap()
	err = sixteen(0, n, func(i int) error { return memTurn(ctx, node, fmt.Sprintf("mem-%d", i)) })
	if err != nil {
		return Result{}, err
	}
	per := float64(heap()-before) / float64(n)
	return Result{Name: fmt.Sprintf("memory per session at %d sessions (%s)", n, e.Mode()), Value: per, Unit: "bytes",
		Note: "heap held after one turn on each new session, node keeping no states"}, nil
}

func memTurn(ctx context.Context, node *lash.Node, id string) error {
	s := node.Session(id)
	if _, _, err := s.Send(ctx, "k", lash.Input{Text: "hi"}); err != nil {
		return err
	}
	res, err := s.Run(ctx)
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("memory: session %s ran %d turns", id, len(res))
	}
	return err
}

// heap is the memory the process's live objects take, after a collection.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// heapApart is the heap in use, after a collection, split into what the
// embedded nats-server allocated (any frame of its package on the
// allocation's stack) and the rest (the node and the bench). It reads the
// runtime's sampled heap profile and scales each record as pprof does, so
// it is an estimate at the profile's rate.
func heapApart() (node, server int64) {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(nil, false)
		recs = make([]runtime.MemProfileRecord, n+64)
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	for i := range recs {
		r := &recs[i]
		bytes, objs := r.InUseBytes(), r.InUseObjects()
		if objs <= 0 || bytes <= 0 {
			continue
		}
		est := float64(bytes)
		if rate > 1 {
			est /= 1 - math.Exp(-float64(bytes)/float64(objs)/rate)
		}
		if fromServer(r.Stack()) {
			server += int64(est)
		} else {
			node += int64(est)
		}
	}
	return node, server
}

func fromServer(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/nats-io/nats-server/") {
			return true
		}
		if !more {
			return false
		}
	}
}
