package lash

import (
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
)

// OpenProjection opens the session read model of the deployment c belongs to
// in dir. Inputs that fail CheckInput are set aside in its quarantine.
func OpenProjection(dir string, c *streams.Client) (*projector.Projector, error) {
	prefix := c.Config().Prefix
	return projector.Open(dir, c, projector.Config{Stream: streams.Sessions, Filter: prefix + ".sess.>",
		Folds: []projector.Fold{projector.NewSessions(prefix, projector.WithInputCheck(CheckInput))}})
}

// CheckInput reports why data is not a readable input, or nil. A node
// consumes such an input with a turn that records the error.
func CheckInput(data []byte) error {
	_, err := parseInput(data)
	return err
}
