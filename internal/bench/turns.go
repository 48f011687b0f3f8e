package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/lash-run/lash"
)

// The round trips of the smallest turn (a sync of tools, a model call, a
// checkpoint) until its commit, run by a serving node on a session it ran
// before: the input's publish and delivery, the lease claim, the next
// input read, the fence, the tools' record, the checkpoint's read of the
// inputs, the model answer's record (which holds the checkpoint's answer),
// the commit. ADR 0017 lists them, with those after the commit.
const (
	turnWrites = 5 // claim, fence, two records, commit (the input is in Hop)
	turnReads  = 2 // next input, checkpoint
)

// Latency times n inputs from Send until their turn's commit on a node
// that serves one session, against the raw round trips the turn needs
// done one after another on streams made like lash's (rawSeq, timed
// between the turns: the ratio), and against the sum of each one's median
// timed alone (the note). The sequence is the fairer floor: a turn is a
// sum of round trips, and the median of a sum is not the sum of medians
// when each is skewed. Each sample pairs a turn with the sequence timed
// right after it, and the ratio is the median of the samples' ratios (the
// machine's speed drifts): at least latencySamples of them.
func Latency(ctx context.Context, e *Env, f Floor, n int) (Result, error) {
	n = max(n, latencySamples)
	commits := make(chan struct{}, 1)
	node, nc, err := e.node("latency", loopScript(0), lash.WithObserver(func(ev lash.Event) {
		if ev.Kind == lash.EventTurnCommitted {
			commits <- struct{}{}
		}
	}))
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- node.Serve(sctx) }()
	defer func() { stop(); <-served }()
	s := node.Session("latency")
	took := make([]time.Duration, 0, n)
	var cas, seq []time.Duration
	raw, err := e.newRawSeq(ctx)
	if err != nil {
		return Result{}, err
	}
	var sent uint64
	for i := range n + 5 { // five to warm up
		if i == 5 {
			sent = nc.Stats().OutMsgs
		}
		start := time.Now()
		if _, _, err := s.Send(ctx, fmt.Sprint(i), lash.Input{Text: "hi"}); err != nil {
			return Result{}, err
		}
		select {
		case <-commits:
		case <-time.After(30 * time.Second):
			return Result{}, errors.New("latency: no commit within 30s")
		}
		if i >= 5 {
			took = append(took, time.Since(start))
			more, err := e.CAS(ctx, 2)
			if err != nil {
				return Result{}, err
			}
			cas = append(cas, more...)
			d, err := raw.turn(ctx)
			if err != nil {
				return Result{}, err
			}
			seq = append(seq, d)
		}
	}
	// What the node sent per turn (the last release may come after).
	perTurn := float64(nc.Stats().OutMsgs-sent) / float64(n)
	alone := f.Hop + turnWrites*median(cas) + turnReads*f.Read
	got, floor := median(took), median(seq)
	ratios := make([]float64, len(took))
	for i := range took {
		ratios[i] = float64(took[i]) / float64(seq[i])
	}
	return Result{Name: "input to commit, 3-effect turn (" + e.Mode() + ")", Value: ms(got), Unit: "ms", Floor: ms(floor),
		Ratio: median(ratios), Note: fmt.Sprintf("floor: its round trips raw, one after another (hop + %d CAS + %d reads), timed after each turn, the median of %d samples' ratios; their medians %.2fx; %.1f messages from the node per turn; the same timed alone %.3f ms, %.2fx",
			turnWrites, turnReads, len(took), float64(got)/float64(floor), perTurn, ms(alone), float64(got)/float64(alone))}, nil
}

// latencySamples is the fewest samples Latency takes.
const latencySamples = 200

// EffectCost is what one more effect adds to a turn: turns of 8 tool
// rounds against turns of none, per effect they add, against a raw CAS
// publish timed between the turns (the ratio), and against the round trips
// of a tool round done raw, per effect (the note's "raw tool round").
//
// An effect is a small difference between two turns' times, on machines
// whose speed drifts by half within seconds, so each sample pairs a turn
// of rounds, a turn without and a run of CAS publishes timed right after
// them, and the ratio is the median of the samples' ratios; it takes at
// least effectSamples of them.
func EffectCost(ctx context.Context, e *Env, n int) (Result, error) {
	const rounds = 8
	n = max(n, effectSamples)
	node, nc, err := e.node("effects", loopScript(rounds))
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	var sent uint64 // what the node sent in the timed turns of rounds, less those without
	turn := func(i int, text string) (time.Duration, int, error) {
		s := node.Session(fmt.Sprintf("fx-%s-%d", text, i))
		if _, _, err := s.Send(ctx, "k", lash.Input{Text: text}); err != nil {
			return 0, 0, err
		}
		before := nc.Stats().OutMsgs
		start := time.Now()
		res, err := s.Run(ctx)
		if i >= 3 {
			if d := nc.Stats().OutMsgs - before; text == "rounds" {
				sent += d
			} else {
				sent -= d
			}
		}
		if err != nil || len(res) != 1 || res[0].Replayed != 0 {
			return 0, 0, fmt.Errorf("effect cost: %v, %v", res, err)
		}
		// The machine's effects, recorded or not: a sync, a model call and
		// a checkpoint, and a model call, a call and a checkpoint a round.
		calls := 0
		for _, m := range res[0].Outcome.Messages {
			calls += len(m.ToolCalls)
		}
		return time.Since(start), 3 + 3*calls, nil
	}
	var short, long, cas, runs, rawRounds []time.Duration
	var shortFx, longFx int
	raw, err := e.newRawSeq(ctx)
	if err != nil {
		return Result{}, err
	}
	for i := range n + 3 {
		a, fa, err := turn(i, "none")
		if err != nil {
			return Result{}, err
		}
		b, fb, err := turn(i, "rounds")
		if err != nil {
			return Result{}, err
		}
		if i >= 3 {
			short, long = append(short, a), append(long, b)
			more, err := e.CAS(ctx, 8)
			if err != nil {
				return Result{}, err
			}
			cas = append(cas, more...)
			run, err := e.CASRun(ctx, 2*rounds)
			if err != nil {
				return Result{}, err
			}
			runs = append(runs, run)
			for range 2 {
				d, err := raw.round(ctx)
				if err != nil {
					return Result{}, err
				}
				rawRounds = append(rawRounds, d)
			}
		}
		shortFx, longFx = fa, fb
	}
	if longFx <= shortFx {
		return Result{}, fmt.Errorf("effect cost: %d effects with rounds, %d without", longFx, shortFx)
	}
	fx := time.Duration(longFx - shortFx)
	pers := make([]time.Duration, len(long))
	ratios := make([]float64, len(long))
	for i := range long {
		pers[i] = (long[i] - short[i]) / fx
		ratios[i] = float64(pers[i]) / float64(runs[i])
	}
	per, floor, one := median(pers), median(runs), median(cas)
	apart := (median(long) - median(short)) / fx
	return Result{Name: "effect cost (" + e.Mode() + ")", Value: ms(per), Unit: "ms", Floor: ms(floor), Ratio: median(ratios),
		Note: fmt.Sprintf("(turn of %d effects - turn of %d) / %d, against a CAS publish in a run of %d (the records the rounds add) timed with it, the median of %d samples' ratios; their medians apart %.3f ms, %.2fx; one CAS alone %.3f ms, %.2fx; a raw tool round per effect %.3f ms, %.2fx; %.1f messages from the node a round",
			longFx, shortFx, longFx-shortFx, 2*rounds, len(long), ms(apart), float64(apart)/float64(floor), ms(one), float64(per)/float64(one),
			ms(median(rawRounds)/3), float64(per)/float64(median(rawRounds)/3), float64(sent)/float64(n*rounds))}, nil
}

// cpuNote says what a rate's CPU per turn allows: turns/s can rise no
// further than the machine's cores at that CPU a turn, so against base
// (the rate at one session) to at most cores/cpu/base.
func cpuNote(rate, base float64, cpu time.Duration) string {
	if cpu <= 0 {
		return ""
	}
	cores := runtime.NumCPU()
	return fmt.Sprintf("; %d us CPU a turn, %.1f of %d cores busy, so at most %.1fx",
		cpu.Microseconds(), rate*cpu.Seconds(), cores, float64(cores)/cpu.Seconds()/base)
}

// effectSamples is the fewest samples EffectCost takes: seconds without
// fsync, ten or so with it.
const effectSamples = 400

// Throughput runs turns on that many sessions at once, each sending its
// next input when its last turn committed, and returns turns per second
// and the process's CPU per turn (cpuTime; 0 where it is unknown). Each
// turn makes that many tool rounds of one call; with rounds, each turn is
// the first of a session of its own.
func Throughput(ctx context.Context, e *Env, sessions, turnsEach, rounds int, tag string) (float64, time.Duration, error) {
	node, nc, err := e.node("tp-"+tag, loopScript(rounds), lash.WithConcurrency(sessions))
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	start, cpu := time.Now(), cpuTime()
	for k := range sessions {
		wg.Go(func() {
			s := node.Session(fmt.Sprintf("tp-%s-%d-%d", tag, sessions, k))
			for i := range turnsEach {
				if rounds > 0 {
					// The script counts the session's tool results: a
					// turn of rounds starts a session of its own.
					s = node.Session(fmt.Sprintf("tp-%s-%d-%d-%d", tag, sessions, k, i))
				}
				if _, _, err := s.Send(ctx, fmt.Sprint(i), lash.Input{Text: "rounds"}); err != nil {
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
	wg.Wait()
	took, cpu := time.Since(start), cpuTime()-cpu
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	turns := sessions * turnsEach
	return float64(turns) / took.Seconds(), cpu / time.Duration(turns), nil
}

// History times turns on sessions that have committed h turns, against
// the same on the first (a session of one turn): the sessions are built
// first, then their turns are timed in turn, so that drift in the
// machine's speed falls on all alike, and the ratio is the median of each
// round's ratios (at least historySamples rounds).
func History(ctx context.Context, e *Env, hs []int, n int) ([]Result, error) {
	n = max(n, historySamples)
	node, nc, err := e.node("history", loopScript(0))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	turn := func(s *lash.Session, i int) (time.Duration, error) {
		if _, _, err := s.Send(ctx, fmt.Sprint(i), lash.Input{Text: "hi"}); err != nil {
			return 0, err
		}
		start := time.Now()
		if _, err := s.Run(ctx); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	sessions := make([]*lash.Session, len(hs))
	for k, h := range hs {
		sessions[k] = node.Session(fmt.Sprintf("history-%d", h))
		for i := range h {
			if _, err := turn(sessions[k], i); err != nil {
				return nil, err
			}
		}
	}
	took := make([][]time.Duration, len(hs))
	for i := range n {
		for k, h := range hs {
			d, err := turn(sessions[k], h+i)
			if err != nil {
				return nil, err
			}
			took[k] = append(took[k], d)
		}
	}
	var out []Result
	base := median(took[0])
	for k, h := range hs {
		got := median(took[k])
		ratios := make([]float64, n)
		for i := range n {
			ratios[i] = float64(took[k][i]) / float64(took[0][i])
		}
		out = append(out, Result{Name: fmt.Sprintf("turn at history %d (%s)", h, e.Mode()), Value: ms(got), Unit: "ms",
			Floor: ms(base), Ratio: median(ratios), Note: fmt.Sprintf("floor: a turn at history %d timed with it, the median of %d samples' ratios; their medians %.2fx",
				hs[0], n, float64(got)/float64(base))})
	}
	return out, nil
}

// historySamples is the fewest rounds History times.
const historySamples = 200

// toolRounds is how many tool rounds the turns of the second effects/s
// figure make: turns of 3 + 3*toolRounds effects.
const toolRounds = 8

// Concurrency runs turns on 1 and more sessions at once: turns per second
// against one session's and against the same round trips done raw by as
// many writers (RawTurns, run right after), and effects per second against
// what a journal that fsyncs each append alone allows (one CAS publish
// after another, timed just before and after the turns), for the smallest
// turn and for turns of toolRounds rounds, with the appends to lash's
// streams counted per effect.
func Concurrency(ctx context.Context, e *Env, counts []int, n int) ([]Result, error) {
	var out []Result
	var base, rawBase float64
	for _, c := range counts {
		each := max(4, 4*n/c)
		before, err := e.CAS(ctx, 50)
		if err != nil {
			return nil, err
		}
		tps, cpu, err := Throughput(ctx, e, c, each, 0, fmt.Sprint(c))
		if err != nil {
			return nil, err
		}
		appended, err := e.appends(ctx)
		if err != nil {
			return nil, err
		}
		rtps, _, err := Throughput(ctx, e, c, max(2, each/8), toolRounds, fmt.Sprint(c, "r"))
		if err != nil {
			return nil, err
		}
		rounds, err := e.appends(ctx)
		if err != nil {
			return nil, err
		}
		after, err := e.CAS(ctx, 50)
		if err != nil {
			return nil, err
		}
		const roundEffects = 3 + 3*toolRounds
		perEffect := float64(rounds-appended) / float64(c*max(2, each/8)*roundEffects)
		raw, rawCPU, err := e.RawTurns(ctx, c, 2*time.Second)
		if err != nil {
			return nil, err
		}
		if base == 0 {
			base, rawBase = tps, raw
		}
		perAppend := 1 / median(append(before, after...)).Seconds()
		note := fmt.Sprintf("floor: turns/s at %d; higher is better", counts[0]) + cpuNote(tps, base, cpu)
		rawNote := fmt.Sprintf("a turn's round trips, raw; floor: the same at %d; higher is better", counts[0]) + cpuNote(raw, rawBase, rawCPU)
		out = append(out,
			Result{Name: fmt.Sprintf("turns/s at %d sessions (%s)", c, e.Mode()), Value: tps, Unit: "turns/s",
				Floor: base, Ratio: tps / base, Note: note},
			Result{Name: fmt.Sprintf("raw turns/s at %d writers (%s)", c, e.Mode()), Value: raw, Unit: "turns/s",
				Floor: rawBase, Ratio: raw / rawBase, Note: rawNote},
			Result{Name: fmt.Sprintf("turns/s at %d sessions vs raw (%s)", c, e.Mode()), Value: tps, Unit: "turns/s",
				Floor: raw, Ratio: tps / raw, Note: "floor: raw turns/s at as many writers; higher is better"},
			Result{Name: fmt.Sprintf("effects/s at %d sessions (%s)", c, e.Mode()), Value: 3 * tps, Unit: "effects/s",
				Floor: perAppend, Ratio: 3 * tps / perAppend, Note: "floor: one CAS publish after another; higher is better"},
			Result{Name: fmt.Sprintf("effects/s at %d sessions, %d tool rounds a turn (%s)", c, toolRounds, e.Mode()), Value: roundEffects * rtps, Unit: "effects/s",
				Floor: perAppend, Ratio: roundEffects * rtps / perAppend,
				Note: fmt.Sprintf("%.2f appends per effect; floor: one CAS publish after another; higher is better", perEffect)})
	}
	return out, nil
}
