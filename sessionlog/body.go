package sessionlog

import (
	"fmt"

	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// TurnBody is what lash commits for a finished turn: the turn's outcome,
// the revision of the last input it consumed and the inputs it took.
type TurnBody struct {
	Outcome     turn.Outcome `msgpack:"o"`
	InputCursor uint64       `msgpack:"c"`
	// Inputs are the inputs the turn consumed, with their keys: a key is
	// recognised for as long as the log lasts, not only within JetStream's
	// dedupe window.
	Inputs []InputUse `msgpack:"i,omitempty"`
}

// ConsumeBody is the body of a consume entry: inputs consumed without a
// turn, and why.
type ConsumeBody struct {
	Inputs      []InputUse `msgpack:"i"`
	InputCursor uint64     `msgpack:"c"`
}

// InputUse is one input a commit or a consume took.
type InputUse struct {
	Seq uint64 `msgpack:"s"`
	// Key is the input's idempotency key (its msg id without the session's
	// scope); empty for an input published without one.
	Key string `msgpack:"k,omitempty"`
	// Hash is the sha256 of the input's payload.
	Hash [32]byte `msgpack:"h"`
	// Duplicate names the earlier input with the same key and payload: this
	// one was passed over.
	Duplicate uint64 `msgpack:"d,omitempty"`
	// Refused says why the input was consumed without being taken.
	Refused string `msgpack:"r,omitempty"`
	// Decision: the input came on the session's decision subject.
	Decision bool `msgpack:"c,omitempty"`
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

// EncodeConsumeBody encodes a body for Consume.
func EncodeConsumeBody(b *ConsumeBody) ([]byte, error) { return msgpack.Marshal(b) }

// DecodeConsumeBody reads a consume's body.
func DecodeConsumeBody(data []byte) (*ConsumeBody, error) {
	var b ConsumeBody
	if err := msgpack.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: consume body: %v", ErrMalformed, err)
	}
	if len(b.Inputs) == 0 || b.InputCursor == 0 {
		return nil, fmt.Errorf("%w: consume body without inputs", ErrMalformed)
	}
	return &b, nil
}

// DecodeEntry reads a session log message.
func DecodeEntry(data []byte) (*Entry, error) { return decodeEntry(data) }
