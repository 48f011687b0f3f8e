package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/lash-run/lash/sessionlog"
)

// BenchmarkFailoverSIGKILL: a lash-node process holds a session whose
// model call never answers and is killed with SIGKILL; another lash-node
// on the same host, where the dead PID proves the holder's death, commits
// the turn. It reports the time from the kill to the commit (the dispatch
// ack wait is 750 ms).
//
//	go test ./e2e -run '^$' -bench FailoverSIGKILL -benchtime 5x
func BenchmarkFailoverSIGKILL(b *testing.B) {
	d := newDeployment(b)
	var total time.Duration
	for i := range b.N {
		session := fmt.Sprintf("failover-%d", i)
		victim := d.node(fmt.Sprintf("victim-%d", i), "default\n  hang\n")
		commits, err := d.nc.SubscribeSync("lash.sess." + session + ".ev")
		if err != nil {
			b.Fatal(err)
		}
		d.send(session, "k", []byte(`{"text":"hi"}`))
		d.holder(session) // the victim, the only node serving
		survivor := d.node(fmt.Sprintf("survivor-%d", i), "default\n  say done\n")
		killed := time.Now()
		victim.kill()
		for {
			m, err := commits.NextMsg(30 * time.Second)
			if err != nil {
				b.Fatalf("no commit of %s after the kill: %v", session, err)
			}
			if e, err := sessionlog.DecodeEntry(m.Data); err == nil && e.Kind == sessionlog.KindCommit {
				total += time.Since(killed)
				break
			}
		}
		_ = commits.Unsubscribe()
		survivor.kill()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
}
