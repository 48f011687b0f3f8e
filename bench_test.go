package lash_test

import (
	"context"
	"fmt"
	"github.com/lash-run/lash/codemode"
	"os"
	"testing"

	"github.com/lash-run/lash/internal/bench"
	"github.com/lash-run/lash/testenv"
)

// The benchmarks of internal/bench, on an embedded server that fsyncs
// before it acknowledges (lash's default) and on one that does not. Each
// reports its figure and its ratio to the raw JetStream floor measured in
// the same run; b.N only sets how many samples each takes. lash-bench runs
// the same with larger counts (README, "Performance").

// TestMain runs BenchmarkClientAPI's clients, or a program's sandbox,
// when this binary is started again as their process.
func TestMain(m *testing.M) {
	codemode.ServeChild()
	bench.RunClient()
	os.Exit(m.Run())
}

func env(b *testing.B, sync bool) (*bench.Env, bench.Floor) {
	b.Helper()
	e, err := bench.Start(b.TempDir(), sync)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	f, err := e.MeasureFloor(context.Background(), 200)
	if err != nil {
		b.Fatal(err)
	}
	return e, f
}

func report(b *testing.B, rs ...bench.Result) {
	b.Helper()
	for _, r := range rs {
		b.Logf("%s: %.3f %s, floor %.3f, ratio %.2fx (%s)", r.Name, r.Value, r.Unit, r.Floor, r.Ratio, r.Note)
	}
	if len(rs) == 1 {
		b.ReportMetric(rs[0].Value, rs[0].Unit)
		b.ReportMetric(rs[0].Ratio, "x-floor")
	}
}

func modes(b *testing.B, fn func(b *testing.B, e *bench.Env, f bench.Floor)) {
	for _, sync := range []bool{true, false} {
		name := "fsync"
		if !sync {
			name = "lazy"
		}
		b.Run(name, func(b *testing.B) {
			e, f := env(b, sync)
			fn(b, e, f)
		})
	}
}

// BenchmarkLatency: input to commit on a serving node.
func BenchmarkLatency(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		r, err := bench.Latency(b.Context(), e, f, max(b.N, 20))
		if err != nil {
			b.Fatal(err)
		}
		report(b, r)
	})
}

// BenchmarkEffect: what one more effect adds to a turn.
func BenchmarkEffect(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		r, err := bench.EffectCost(b.Context(), e, max(b.N, 20))
		if err != nil {
			b.Fatal(err)
		}
		report(b, r)
	})
}

// BenchmarkProcesses: a background tool call from registration to its
// end, and an await of an ended process.
func BenchmarkProcesses(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		rs, err := bench.Processes(b.Context(), e, max(b.N, 20))
		if err != nil {
			b.Fatal(err)
		}
		report(b, rs...)
		b.ReportMetric(rs[0].Ratio, "x-cas-start-to-end")
		b.ReportMetric(rs[1].Ratio, "x-cas-await-ended")
	})
}

// BenchmarkSleeps: CPU while sleeps wait, and a sleep's wake with 10 and
// 2000 parked (lash-bench -only sleeps parks 10,000).
func BenchmarkSleeps(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		rs, err := bench.Sleeps(b.Context(), e, []int{10, 2000}, 20)
		if err != nil {
			b.Fatal(err)
		}
		report(b, rs...)
		b.ReportMetric(rs[3].Ratio, "x-wake-2000-vs-10")
	})
}

// BenchmarkConcurrency: turns/s at 1 to 256 sessions at once.
func BenchmarkConcurrency(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		for _, c := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("sessions=%d", c), func(b *testing.B) {
				rs, err := bench.Concurrency(b.Context(), e, []int{c}, max(b.N, 20))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(rs[0].Value, "turns/s")
				b.ReportMetric(rs[1].Value, "raw-turns/s")
				b.ReportMetric(rs[2].Ratio, "x-raw")
				b.ReportMetric(rs[3].Ratio, "x-per-append-fsync")
			})
		}
	})
}

// BenchmarkConcurrencyR3: the same on a cluster of three servers that
// fsync before they acknowledge, with every stream replicated to all
// three: each write is a Raft round, and writes of concurrent turns share
// the log's flushes.
func BenchmarkConcurrencyR3(b *testing.B) {
	c := testenv.RunCluster(b, 3, testenv.WithSyncAlways())
	e, err := bench.Attach(c.URL(), 3, true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	if _, err := e.MeasureFloor(context.Background(), 100); err != nil {
		b.Fatal(err)
	}
	// One run over all counts, so that the ratios to one session are of
	// the same run.
	rs, err := bench.Concurrency(b.Context(), e, []int{1, 16, 64}, max(b.N, 20))
	if err != nil {
		b.Fatal(err)
	}
	report(b, rs...)
	for _, r := range rs {
		switch r.Name {
		case "turns/s at 64 sessions (fsync R3)":
			b.ReportMetric(r.Ratio, "x-turns/s-64-vs-1")
		case "effects/s at 16 sessions (fsync R3)":
			b.ReportMetric(r.Ratio, "x-effects/s-16-vs-per-append")
		}
	}
}

// BenchmarkMemory: the memory a session that ran one turn leaves held.
func BenchmarkMemory(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		r, err := bench.MemoryPerSession(b.Context(), e, max(b.N, 2000))
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %.0f %s (%s)", r.Name, r.Value, r.Unit, r.Note)
		b.ReportMetric(r.Value, "bytes/session")
	})
}

// BenchmarkHistory: a turn on a session with 1, 100 and 1000 turns behind.
func BenchmarkHistory(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		rs, err := bench.History(b.Context(), e, []int{1, 100, 1000}, max(b.N, 20))
		if err != nil {
			b.Fatal(err)
		}
		report(b, rs...)
		b.ReportMetric(rs[len(rs)-1].Ratio, "x-history-1")
	})
}

// BenchmarkSessions: listing leases and a new session's turn at 1k and 10k
// sessions run (lash-bench goes to 100k and more).
func BenchmarkSessions(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		rs, err := bench.Sessions(b.Context(), e, []int{1000, 10000}, 10)
		if err != nil {
			b.Fatal(err)
		}
		report(b, rs...)
		b.ReportMetric(rs[len(rs)-2].Ratio, "x-list-at-1k")
	})
}

// BenchmarkFailover: a killed node's turn resumed by another, with and
// without proof of its death.
func BenchmarkFailover(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		for _, proof := range []bool{true, false} {
			r, err := bench.Failover(b.Context(), e, proof)
			if err != nil {
				b.Fatal(err)
			}
			report(b, r)
		}
	})
}

// BenchmarkBoot: a node's boot and heap on a deployment where 100,000
// background calls and as many trigger deliveries ended and were pruned,
// against one where 1,000 were (lazy fsync: the load is what takes long).
func BenchmarkBoot(b *testing.B) {
	e, _ := env(b, false)
	rs, err := bench.Boot(b.Context(), e, 1000, 100000)
	if err != nil {
		b.Fatal(err)
	}
	report(b, rs...)
	b.ReportMetric(rs[0].Ratio, "x-boot-vs-1000")
	b.ReportMetric(rs[1].Ratio, "x-heap-vs-1000")
}

// BenchmarkAgentTurn: a turn under a named agent against one under the
// default agent (issue 32: within 1.05x).
func BenchmarkAgentTurn(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		r, err := bench.AgentTurn(b.Context(), e, max(b.N, 20))
		if err != nil {
			b.Fatal(err)
		}
		report(b, r)
	})
}

// BenchmarkClientAPI: a message over HTTP (the AI SDK's chat endpoint) to
// its first streamed piece and its commit, against the node API over NATS
// (issue 33: within 1.2x).
func BenchmarkClientAPI(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		rs, err := bench.ClientAPI(b.Context(), e, max(b.N, 20))
		if err != nil {
			b.Fatal(err)
		}
		report(b, rs...)
		b.ReportMetric(rs[0].Ratio, "x-first-byte")
		b.ReportMetric(rs[1].Ratio, "x-commit")
	})
}

// BenchmarkPrograms: a program of 8 calls against 8 tool rounds, and one
// more call in a program's fan-out against one more in a tool round
// (issue 34: within 1.2x).
func BenchmarkPrograms(b *testing.B) {
	modes(b, func(b *testing.B, e *bench.Env, f bench.Floor) {
		rs, err := bench.Programs(b.Context(), e, max(b.N, 20))
		if err != nil {
			b.Fatal(err)
		}
		report(b, rs...)
		b.ReportMetric(rs[0].Ratio, "x-program")
		b.ReportMetric(rs[1].Ratio, "x-call")
	})
}
