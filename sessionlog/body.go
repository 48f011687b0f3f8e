package sessionlog

import (
	"fmt"

	"github.com/lash-run/lash/internal/pack"
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
	// Agent is the agent the session is bound to after the turn ("name",
	// or "name@N" when pinned); empty for the deployment's default agent.
	Agent string `msgpack:"a,omitempty"`
	// Labels are the session's labels, set by the input that started it:
	// on its first turn's commit only, sorted by key.
	Labels []Label `msgpack:"l,omitempty"`
}

// Label is one of a session's labels.
type Label struct {
	Key   string `msgpack:"k"`
	Value string `msgpack:"v"`
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
// bytes: the encoding has no maps. A body without suspended calls, most
// of them, is written by hand as msgpack.Marshal writes it
// (TestTurnBodyEncodesAsMsgpack).
func EncodeTurnBody(b *TurnBody) ([]byte, error) {
	o := &b.Outcome
	if len(o.Suspended) > 0 {
		return msgpack.Marshal(b)
	}
	size := 128
	for _, m := range o.Messages {
		size += 16 + len(m.Text)
	}
	out := pack.Map(make([]byte, 0, size+64*len(b.Inputs)), 2+pack.Count(len(b.Inputs) > 0, b.Agent != "", len(b.Labels) > 0))
	out = pack.Map(pack.Str(out, "o"), 6)
	out = pack.Uint8(pack.Str(out, "Status"), uint8(o.Status))
	t := o.Termination
	out = pack.Map(pack.Str(out, "Termination"), 1+pack.Count(t.Code != "", t.Detail != ""))
	out = pack.Uint8(pack.Str(out, "r"), uint8(t.Reason))
	if t.Code != "" {
		out = pack.Str(pack.Str(out, "c"), t.Code)
	}
	if t.Detail != "" {
		out = pack.Str(pack.Str(out, "d"), t.Detail)
	}
	out = turn.AppendMessages(pack.Str(out, "Messages"), o.Messages)
	out = pack.Str(out, "Suspended")
	if o.Suspended == nil {
		out = pack.Nil(out)
	} else {
		out = pack.Array(out, 0)
	}
	out = turn.AppendUsage(pack.Str(out, "Usage"), o.Usage)
	out = pack.Int(pack.Str(out, "Iterations"), o.Iterations)
	out = pack.Uint64(pack.Str(out, "c"), b.InputCursor)
	if len(b.Inputs) > 0 {
		out = pack.Array(pack.Str(out, "i"), len(b.Inputs))
		for i := range b.Inputs {
			out = b.Inputs[i].append(out)
		}
	}
	if b.Agent != "" {
		out = pack.Str(pack.Str(out, "a"), b.Agent)
	}
	if len(b.Labels) > 0 {
		out = pack.Array(pack.Str(out, "l"), len(b.Labels))
		for _, l := range b.Labels {
			out = pack.Str(pack.Str(pack.Str(pack.Str(pack.Map(out, 2), "k"), l.Key), "v"), l.Value)
		}
	}
	return out, nil
}

func (u *InputUse) append(b []byte) []byte {
	b = pack.Map(b, 2+pack.Count(u.Key != "", u.Duplicate != 0, u.Refused != "", u.Decision))
	b = pack.Uint64(pack.Str(b, "s"), u.Seq)
	if u.Key != "" {
		b = pack.Str(pack.Str(b, "k"), u.Key)
	}
	b = pack.Bin(pack.Str(b, "h"), u.Hash[:])
	if u.Duplicate != 0 {
		b = pack.Uint64(pack.Str(b, "d"), u.Duplicate)
	}
	if u.Refused != "" {
		b = pack.Str(pack.Str(b, "r"), u.Refused)
	}
	if u.Decision {
		b = pack.Bool(pack.Str(b, "c"), true)
	}
	return b
}

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
