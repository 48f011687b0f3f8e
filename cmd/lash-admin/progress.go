package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress shows how far a fold has come: a bar redrawn in place on a
// terminal, a line every few seconds otherwise, and a final line.
type progress struct {
	label   string
	w       io.Writer
	tty     bool
	total   uint64
	applied func() uint64
	start   time.Time

	stop chan struct{}
	done sync.WaitGroup
}

// Redraw intervals.
const (
	ttyEvery  = 100 * time.Millisecond
	lineEvery = 3 * time.Second
)

func startProgress(label string, w io.Writer, tty bool, total uint64, applied func() uint64) *progress {
	p := &progress{label: label, w: w, tty: tty, total: total, applied: applied, start: time.Now(), stop: make(chan struct{})}
	every := lineEvery
	if tty {
		every = ttyEvery
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw(false)
			}
		}
	}()
	return p
}

// finish stops the redraws and prints the final line.
func (p *progress) finish() {
	close(p.stop)
	p.done.Wait()
	p.draw(true)
}

func (p *progress) draw(final bool) {
	line := progressLine(p.label, p.applied(), p.total, time.Since(p.start))
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r%s\n", line)
	case p.tty:
		fmt.Fprintf(p.w, "\r%s", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

// progressLine is one rendering of the progress: what is folded, a bar,
// the stream sequence applied of the last one, the percentage and the
// rate.
func progressLine(label string, applied, total uint64, elapsed time.Duration) string {
	total = max(total, applied) // the fold may reach messages appended since it started
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(applied) / float64(total)
	}
	const width = 30
	filled := int(pct / 100 * width)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(applied) / s
	}
	return fmt.Sprintf("%-9s [%s%s] %d/%d %3.0f%% %.0f msg/s", label, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		applied, total, pct, rate)
}
