package sessionlog

import (
	"fmt"

	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// TurnBody is what lash commits for a finished turn: the turn's outcome and
// the revision of the last input it consumed.
type TurnBody struct {
	Outcome     turn.Outcome `msgpack:"o"`
	InputCursor uint64       `msgpack:"c"`
}

// EncodeTurnBody encodes a body for Commit. Equal bodies encode to equal
// bytes: the encoding has no maps.
func EncodeTurnBody(b *TurnBody) ([]byte, error) { return msgpack.Marshal(b) }

// DecodeTurnBody reads a commit's body.
func DecodeTurnBody(data []byte) (*TurnBody, error) {
	var b TurnBody
	if err := msgpack.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: turn body: %v", ErrMalformed, err)
	}
	if b.Outcome.Status < turn.StatusRunning || b.Outcome.Status > turn.StatusDone {
		return nil, fmt.Errorf("%w: turn body with run status %d", ErrMalformed, b.Outcome.Status)
	}
	return &b, nil
}

// DecodeEntry reads a session log message.
func DecodeEntry(data []byte) (*Entry, error) { return decodeEntry(data) }
