// Command lash-bench measures lash against the JetStream operations it is
// built on, on an embedded server in a temporary directory, and prints each
// figure with its floor and their ratio. Ratios are what to compare between
// machines and runs; absolute times move with the disk and the CPU.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/lash-run/lash/codemode"
	"os"
	"strconv"
	"strings"

	"github.com/lash-run/lash/internal/bench"
)

func main() {
	codemode.ServeChild() // a program's sandbox, in this binary started again
	bench.RunClient()     // the client API's clients, likewise
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "lash-bench:", err)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("lash-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: lash-bench [flags]\n\nMeasures lash against raw JetStream operations on an embedded server.\n\n")
		fs.PrintDefaults()
	}
	modes := fs.String("mode", "fsync,lazy", "fsync modes to measure: fsync (acknowledge after fsync, lash's default), lazy")
	only := fs.String("only", "latency,effects,concurrency,history,sessions,memory,failover,processes,sleeps,boot,clientapi,programs", "what to measure")
	samples := fs.Int("n", 50, "samples per figure (input to commit and history take at least 200, effect cost 400)")
	conc := fs.String("concurrency", "1,16,64,256", "sessions at once for turns per second")
	history := fs.String("history", "1,100,1000", "committed turns before the timed ones")
	sessions := fs.String("sessions", "1000,100000", "sessions run before listing leases")
	memory := fs.Int("memory", 10000, "new sessions of one turn each for the memory per session")
	sleeps := fs.Int("sleeps", 10000, "sleeps parked while wakes are timed (against 10 parked)")
	boot := fs.String("boot", "1000,100000", "ended and pruned processes (and as many trigger deliveries) before a node's boot is timed: the figure, then the larger to compare")
	dir := fs.String("dir", "", "where the server's temporary directory goes (default: the system's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, w := range strings.Split(*only, ",") {
		want[strings.TrimSpace(w)] = true
	}
	ctx := context.Background()
	for _, mode := range strings.Split(*modes, ",") {
		mode = strings.TrimSpace(mode)
		if mode != "fsync" && mode != "lazy" {
			return fmt.Errorf("-mode: %q is neither fsync nor lazy", mode)
		}
		if err := measure(ctx, *dir, mode == "fsync", want, *samples, *conc, *history, *sessions, *memory, *sleeps, *boot); err != nil {
			return err
		}
	}
	return nil
}

func measure(ctx context.Context, dir string, sync bool, want map[string]bool, n int, conc, history, sessions string, memory, sleeps int, boot string) error {
	e, err := bench.Start(dir, sync)
	if err != nil {
		return err
	}
	defer e.Close()
	f, err := e.MeasureFloor(ctx, max(n, 200))
	if err != nil {
		return err
	}
	fmt.Printf("# %s: CAS publish %.3f ms, leader read %.3f ms, publish to delivery %.3f ms\n",
		e.Mode(), ms(f.CAS), ms(f.Read), ms(f.Hop))
	var rs []bench.Result
	add := func(r ...bench.Result) { rs = append(rs, r...); bench.Print(os.Stdout, r) }
	if want["latency"] {
		r, err := bench.Latency(ctx, e, f, n)
		if err != nil {
			return err
		}
		add(r)
	}
	if want["effects"] {
		r, err := bench.EffectCost(ctx, e, n)
		if err != nil {
			return err
		}
		add(r)
	}
	if want["concurrency"] {
		cs, err := ints(conc)
		if err != nil {
			return fmt.Errorf("-concurrency: %w", err)
		}
		r, err := bench.Concurrency(ctx, e, cs, n)
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["history"] {
		hs, err := ints(history)
		if err != nil {
			return fmt.Errorf("-history: %w", err)
		}
		r, err := bench.History(ctx, e, hs, n)
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["sessions"] {
		ss, err := ints(sessions)
		if err != nil {
			return fmt.Errorf("-sessions: %w", err)
		}
		r, err := bench.Sessions(ctx, e, ss, min(n, 20))
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["memory"] {
		r, err := bench.MemoryPerSession(ctx, e, memory)
		if err != nil {
			return err
		}
		add(r)
	}
	if want["processes"] {
		r, err := bench.Processes(ctx, e, n)
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["boot"] {
		bs, err := ints(boot)
		if err != nil || len(bs) != 2 {
			return fmt.Errorf("-boot: two counts, the smaller first: %v", err)
		}
		r, err := bench.Boot(ctx, e, bs[0], bs[1])
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["sleeps"] {
		r, err := bench.Sleeps(ctx, e, []int{10, sleeps}, 20)
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["clientapi"] {
		r, err := bench.ClientAPI(ctx, e, n)
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["programs"] {
		r, err := bench.Programs(ctx, e, n)
		if err != nil {
			return err
		}
		add(r...)
	}
	if want["failover"] {
		for _, proof := range []bool{true, false} {
			r, err := bench.Failover(ctx, e, proof)
			if err != nil {
				return err
			}
			add(r)
		}
	}
	return nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func ms(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1000 }
