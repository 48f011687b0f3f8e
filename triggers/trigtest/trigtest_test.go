package trigtest_test

import (
	"testing"

	"github.com/lash-run/lash/conformance"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/triggers/trigtest"
)

func TestSingleServer(t *testing.T) {
	srv := testenv.RunJetStream(t)
	trigtest.Run(t, conformance.Env{Name: "single server", Replicas: 1, Conn: srv.Conn})
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster in -short mode")
	}
	testenv.SkipClusterUnderRace(t)
	c := testenv.RunCluster(t, 3)
	trigtest.Run(t, conformance.Env{Name: "3-node cluster", Replicas: 3, Conn: c.Conn})
}
