package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
)

const sleepScript = `
rule long
  when user contains sleep long
  when tools = 0
  call sleep {"seconds": 3600}

rule short
  when user contains sleep short
  when tools = 0
  call sleep {"seconds": 2}

default
  say done
`

// Sleeps parks sleeps on one node that serves, wakes and projects, and
// measures what they cost while they wait and when they wake, with 10 and
// with each of parked sleeps waiting an hour:
//   - the CPU the process (node and embedded server) uses over 3 s while
//     they wait, as a share of one core;
//   - for probes sleeps of 2 s parked beside them, the time from when the
//     server fires each one's timer until the node has woken the call
//     (the median, against the same with 10 parked), and the latest wake
//     after a sleep's due time.
func Sleeps(ctx context.Context, e *Env, parked []int, probes int) ([]Result, error) {
	dir, err := os.MkdirTemp("", "lash-bench-sleeps-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var mu sync.Mutex
	handled := map[string]time.Duration{} // probe session -> fired to woken
	woken := map[string]time.Time{}
	reg := tools.New()
	if err := reg.Register(builtin.Sleep(time.Now)); err != nil {
		return nil, err
	}
	node, nc, err := e.node("sleeps", sleepScript, lash.WithTools(reg), lash.WithProjection(dir), lash.WithConcurrency(64),
		lash.WithObserver(func(ev lash.Event) {
			switch {
			case ev.Kind == lash.EventTimerFired && ev.Effect == "sleep":
				mu.Lock()
				handled[ev.Session] = ev.Took
				mu.Unlock()
			case ev.Kind == lash.EventWake:
				mu.Lock()
				woken[ev.Session] = time.Now()
				mu.Unlock()
			}
		}))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- node.Wake(wctx) }()
	defer func() { stop(); <-done }()

	park := func(prefix, text string, from, to int) error {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		next := make(chan int)
		for range 64 {
			wg.Go(func() {
				for i := range next {
					s := node.Session(fmt.Sprintf("%s-%d", prefix, i))
					if _, _, err := s.Send(ctx, "k", lash.Input{Text: text}); err != nil {
						errs <- err
						return
					}
					if _, err := s.Run(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		close(errs)
		return <-errs
	}
	var out []Result
	var base time.Duration
	have := 0
	for _, p := range parked {
		if err := park("long", "sleep long", have, p); err != nil {
			return nil, err
		}
		have = p
		if err := waitFor(ctx, 2*time.Minute, func() bool {
			ws, err := lash.ParkedWaits(node.Projection())
			return err == nil && len(ws) >= p
		}); err != nil {
			return nil, fmt.Errorf("sleeps: %d parked not projected: %w", p, err)
		}
		// Leases released by the parking turns expire for a few seconds
		// (the server writes their markers): that is the turns' cost, not
		// the waits'.
		time.Sleep(5 * time.Second)
		cpu, err := idleCPU(3 * time.Second)
		if err != nil {
			return nil, err
		}
		tag := fmt.Sprintf("p%d", p)
		mu.Lock()
		clear(handled)
		clear(woken)
		mu.Unlock()
		began := time.Now()
		if err := park("probe-"+tag, "sleep short", 0, probes); err != nil {
			return nil, err
		}
		if err := waitFor(ctx, time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) >= probes }); err != nil {
			return nil, fmt.Errorf("sleeps: probes not woken: %w", err)
		}
		mu.Lock()
		var took []time.Duration
		var late time.Duration
		for s, d := range handled {
			took = append(took, d)
			// Each probe was due 2 s after its turn ran, which was after
			// began: its lateness is at most this.
			late = max(late, woken[s].Sub(began)-2*time.Second)
		}
		mu.Unlock()
		med := median(took)
		if base == 0 {
			base = med
		}
		out = append(out,
			Result{Name: fmt.Sprintf("CPU while %d sleeps wait (%s)", p, e.Mode()), Value: cpu * 100, Unit: "% core",
				Note: "user+sys of the process (node and embedded server) over 3 s, from 5 s after the last was parked; no scan of parked calls"},
			Result{Name: fmt.Sprintf("sleep wake, %d parked (%s)", p, e.Mode()), Value: ms(med), Unit: "ms", Floor: ms(base), Ratio: float64(med) / float64(base),
				Note: fmt.Sprintf("median from the timer firing to the wake appended, %d probes; floor: the same with %d parked; latest wake %.0f ms after due (timers have whole seconds)", probes, parked[0], ms(late))},
		)
	}
	return out, nil
}

// idleCPU is the share of one core the process uses over d.
func idleCPU(d time.Duration) (float64, error) {
	var a, b syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &a); err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d) // measuring idleness: nothing to wait for
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &b); err != nil {
		return 0, err
	}
	used := time.Duration(b.Utime.Nano()+b.Stime.Nano()-a.Utime.Nano()-a.Stime.Nano()) * time.Nanosecond
	return float64(used) / float64(time.Since(start)), nil
}

func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
