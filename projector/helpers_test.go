package projector_test

import (
	"github.com/lash-run/lash/sessionlog"
	"github.com/vmihailenco/msgpack/v5"
)

// msgpackEntry encodes a log entry as sessionlog does, for tests that
// publish raw messages.
func msgpackEntry(e *sessionlog.Entry) ([]byte, error) { return msgpack.Marshal(e) }
