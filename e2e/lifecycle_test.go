package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// marker is in everything the sessions of TestDeleteLeavesNothing write.
const marker = "LASHMARKER"

const lifecycleScript = `
rule work
  when user contains LASHMARKER
  when tools = 0
  call t_big {}
  call process_start {"tool":"t_count","args":{"m":"LASHMARKER"}}
  call sleep {"seconds":1}

default
  say noted
`

// storedBytes sums the bytes of every stream on the server: the
// deployment's, its lease bucket and its object store.
func storedBytes(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	var n uint64
	for _, b := range streamBytes(t, js) {
		n += b
	}
	return n
}

// streamBytes is the bytes of each stream on the server.
func streamBytes(t testing.TB, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.Bytes
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// holding lists the streams holding a message with s in its subject,
// headers or payload, reading every message of every stream.
func holding(t testing.TB, js jetstream.JetStream, s string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []string
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.CachedInfo().State.Msgs == 0 {
			continue
		}
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		last := st.CachedInfo().State.LastSeq
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				break
			}
			md, _ := m.Metadata()
			h := fmt.Sprint(m.Headers())
			if strings.Contains(m.Subject(), s) || strings.Contains(h, s) || bytes.Contains(m.Data(), []byte(s)) {
				out = append(out, fmt.Sprintf("%s: %s", name, m.Subject()))
			}
			if md == nil || md.Sequence.Stream >= last {
				break
			}
		}
	}
	return out
}

// rss is a process's resident memory, in bytes.
func rss(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read a process's memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// steadyRSS is the median of a process's resident memory over ten seconds.
// A node's memory swings by tens of MiB from one second to the next (a
// sweep's reads load the embedded server's block caches, a collection
// drops them); one sample says more about the moment than the node.
func steadyRSS(t testing.TB, pid int) int64 {
	t.Helper()
	var xs []int64
	for range 20 {
		xs = append(xs, rss(t, pid))
		time.Sleep(500 * time.Millisecond)
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// Sessions that kept payloads over 64 KiB (a tool's result, so their
// journals and commits keep objects), started processes, got trigger
// deliveries and slept are deleted, all of them: after the node's sweep the
// streams and the object store hold within 5% of what they held before,
// and not one byte anywhere holds the sessions' marker.
// LASH_LIFECYCLE_SESSIONS sets how many sessions (200; the run is
// 1,000). The node's resident memory after the burst is logged against
// its memory before. With LASH_LIFECYCLE_RSS=1 the node runs apart from
// its server (joined to one the test runs), so that its memory is lash's
// alone, and it must come back within 1.2x of what it was before the
// burst, and again after the same burst a second time.
func TestDeleteLeavesNothing(t *testing.T) {
	sessions := 200
	if v := os.Getenv("LASH_LIFECYCLE_SESSIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LASH_LIFECYCLE_SESSIONS=%q", v)
		}
		sessions = n
	}
	var (
		d    *deployment
		node *proc
		js   jetstream.JetStream
	)
	asserted := os.Getenv("LASH_LIFECYCLE_RSS") == "1"
	if asserted {
		d = newDeployment(t)
		node = d.node("solo", lifecycleScript, "--retention", "1s", "--sweep-every", "2s")
		var err error
		if js, err = jetstream.New(d.nc); err != nil {
			t.Fatal(err)
		}
	} else {
		d, node, js = embedded(t, lifecycleScript, "--retention", "1s", "--sweep-every", "2s")
	}
	big := strings.Repeat(marker+" says a lot. ", 70<<10/len(marker+" says a lot. "))
	for i := range 4 {
		tc, err := nats.Connect(d.url, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tc.Close)
		svc, err := natstool.Serve(tc, "lash", micro.Config{Name: fmt.Sprint("tools-", i), Version: "1.0.0"},
			natstool.Served{Name: "t_big", Description: "answers at length", Schema: []byte(`{"type":"object"}`),
				Handle: func(context.Context, natstool.Request) (string, error) { return big, nil }},
			natstool.Served{Name: "t_count", Description: "counts", Schema: []byte(`{"type":"object"}`),
				Handle: func(context.Context, natstool.Request) (string, error) { return "ok", nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
	}
	node.waitLine("tool found", 30*time.Second)
	d.admin(&struct{}{}, "triggers", "register", "work", "--source", "work.>", "--tool", "t_count")

	// burst sends n sessions their work and a signal each, waits until all
	// is done, and deletes them; it returns the bytes stored before the
	// deletion.
	burst := func(name string, n int) uint64 {
		t.Helper()
		ids := make([]string, n)
		for i := range n {
			ids[i] = fmt.Sprintf("%s-%d", name, i)
			d.send(ids[i], "k1", []byte(`{"text":"`+marker+` work"}`))
			m := nats.NewMsg(fmt.Sprintf("lash.signal.work.%s.%d", name, i))
			m.Header.Set("Nats-Msg-Id", ids[i])
			m.Data = []byte(`{"m":"` + marker + `"}`)
			if _, err := d.nc.RequestMsg(m, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		testenv.WaitFor(t, 5*time.Minute, func() error {
			var ls struct {
				Sessions []struct {
					Session string `json:"session"`
					State   string `json:"state"`
					Turns   int    `json:"turns"`
				} `json:"sessions"`
			}
			if err := d.tryAdmin(&ls, "sessions", "ls", "--limit", "100000"); err != nil {
				return err
			}
			var busy []string
			for _, s := range ls.Sessions {
				if strings.HasPrefix(s.Session, name+"-") && (s.State != "idle" || s.Turns < 2) {
					busy = append(busy, fmt.Sprintf("%s %s after %d turns", s.Session, s.State, s.Turns))
				}
			}
			if len(busy) > 0 {
				return fmt.Errorf("%d of %s's %d sessions not done: %v", len(busy), name, n, busy[:min(len(busy), 10)])
			}
			var ps processList
			if err := d.tryAdmin(&ps, "processes", "ls", "--status", "running"); err != nil {
				return err
			}
			if len(ps.Processes) > 0 {
				return fmt.Errorf("%d processes running", len(ps.Processes))
			}
			return nil
		})
		peak := storedBytes(t, js)
		outText, errText, code := run(t, "lash-admin", append([]string{"--nats", d.url, "sessions", "delete"}, ids...)...)
		if code != 0 {
			t.Fatalf("sessions delete: exit %d: %s", code, errText)
		}
		if c := strings.Count(outText, " deleted: "); c != n {
			t.Fatalf("sessions delete said %d sessions deleted, want %d", c, n)
		}
		return peak
	}
	// settled waits until the node's sweep has left only what was there
	// before (within 5%) and no marker.
	settled := func(before map[string]uint64) uint64 {
		t.Helper()
		var sum, after uint64
		for _, b := range before {
			sum += b
		}
		testenv.WaitFor(t, 2*time.Minute, func() error {
			now := streamBytes(t, js)
			after = 0
			var grew []string
			for name, b := range now {
				after += b
				if b > before[name] {
					grew = append(grew, fmt.Sprintf("%s %d (%d before)", name, b, before[name]))
				}
			}
			if float64(after) > 1.05*float64(sum) {
				return fmt.Errorf("%d bytes stored, %d before: %v", after, sum, grew)
			}
			if left := holding(t, js, marker); len(left) > 0 {
				return fmt.Errorf("%d messages still hold the marker: %v", len(left), left[:min(len(left), 5)])
			}
			return nil
		})
		return after
	}

	// A first round, a tenth of the burst, leaves the deployment and the
	// node as they stay: the caches of its read models and servers (bounded)
	// warm, and what a sweep keeps (two watermarks).
	burst("warm", max(5, sessions/10))
	settled(streamBytes(t, js))
	byStream, memBefore := streamBytes(t, js), steadyRSS(t, node.cmd.Process.Pid)
	before := uint64(0)
	for _, b := range byStream {
		before += b
	}

	began := time.Now()
	peak := burst("s", sessions)
	after := settled(byStream)
	t.Logf("%d sessions in %s: stored %d bytes before, %d at the peak, %d after",
		sessions, time.Since(began).Round(time.Second), before, peak, after)
	if peak < before+uint64(sessions)*64<<10 {
		t.Fatalf("the burst stored %d bytes over the %d before: it did not write what it should", peak-before, before)
	}
	pid, wait := node.cmd.Process.Pid, time.Duration(0)
	if asserted {
		wait = 4 * time.Minute
	}
	memAfter := settledRSS(t, pid, memBefore, wait)
	t.Logf("node memory %.1f MiB after the first round, %.1f after the burst (%.2fx)",
		mib(memBefore), mib(memAfter), float64(memAfter)/float64(memBefore))
	if !asserted {
		// On its embedded server the process holds the server's memory
		// too: what its stores keep for their last blocks, and the Go
		// runtime's metadata of the server's largest heap (README).
		return
	}
	if float64(memAfter) > 1.2*float64(memBefore) {
		t.Fatalf("after the burst the node holds %.1f MiB, %.1f before it", mib(memAfter), mib(memBefore))
	}
	// The same burst again, from where the first left the node: what a
	// burst leaves is bounded, so its memory comes back again.
	again := burst("t", sessions)
	settled(byStream)
	memAgain := settledRSS(t, pid, memAfter, 4*time.Minute)
	t.Logf("the burst again: stored %d bytes at the peak; node memory %.1f MiB after (%.2fx the memory before it)",
		again, mib(memAgain), float64(memAgain)/float64(memAfter))
	if float64(memAgain) > 1.2*float64(memAfter) {
		t.Fatalf("after the burst again the node holds %.1f MiB, %.1f before it", mib(memAgain), mib(memAfter))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// settledRSS waits up to limit for a process's memory to come back within
// 1.2x of before (the node hands memory back after each sweep; an embedded
// server keeps a burst's msg ids for its two-minute dedupe window and its
// block caches ten seconds after their last read) and returns it, back or
// not.
func settledRSS(t testing.TB, pid int, before int64, limit time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		now := steadyRSS(t, pid)
		if float64(now) <= 1.2*float64(before) || time.Now().After(deadline) {
			return now
		}
	}
}
