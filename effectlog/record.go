package effectlog

import (
	"fmt"
	"time"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/internal/pack"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// Outcome is what an effect produced: the encoded result, or a failure.
// A failure is a fact like any other: it replays as the same failure.
type Outcome struct {
	Data   []byte `msgpack:"d,omitempty"`
	Failed bool   `msgpack:"f,omitempty"`
	Error  string `msgpack:"e,omitempty"`
	// Intends says that the tool calls this outcome asks for (the batch
	// that is the next effect of the turn) count as started once it is
	// stored: their runner writes no intent of its own for them, since the
	// record already tells a re-executor that they may have run.
	Intends bool `msgpack:"i,omitempty"`
}

// Record is one journaled outcome.
type Record struct {
	Key     turn.ReplayKey
	Hash    turn.Hash
	Outcome Outcome
	// Seq is the record's stream sequence.
	Seq uint64
	// Recorder names who recorded it; At is when, by its clock.
	Recorder string
	At       time.Time
	// Ref is set when the outcome's data is kept by reference.
	Ref *blobs.Ref
	// Settings is the fingerprint of the recorder's turn settings.
	Settings []byte
}

// wire is the stored form of a record; the key is in the subject and in
// the message too, so a record read alone is self-describing.
type wire struct {
	Session   string    `msgpack:"s"`
	Turn      string    `msgpack:"t"`
	Iteration int       `msgpack:"n"`
	Kind      turn.Kind `msgpack:"k"`
	Effect    uint64    `msgpack:"e"`
	Call      string    `msgpack:"c,omitempty"`
	Hash      []byte    `msgpack:"h"`
	Outcome   Outcome   `msgpack:"o"`
	Recorder  string    `msgpack:"r,omitempty"`
	At        int64     `msgpack:"a,omitempty"`
	// RefSum and RefSize name the outcome's data in the object store when
	// it is kept by reference; Outcome.Data is then empty.
	RefSum   []byte `msgpack:"x,omitempty"`
	RefSize  int64  `msgpack:"z,omitempty"`
	Settings []byte `msgpack:"v,omitempty"`
}

func encode(key turn.ReplayKey, hash turn.Hash, out Outcome, ref *blobs.Ref, recorder string, settings []byte, at time.Time) ([]byte, error) {
	w := &wire{Session: key.Session, Turn: key.Turn, Iteration: key.Iteration, Kind: key.Kind,
		Effect: uint64(key.Effect), Call: key.Call, Hash: hash[:], Outcome: out, Recorder: recorder, At: at.UnixNano(),
		Settings: settings}
	if ref != nil {
		w.Outcome.Data, w.RefSum, w.RefSize = nil, ref.Sum[:], ref.Size
	}
	return w.append(make([]byte, 0, 160+len(w.Session)+len(w.Turn)+len(w.Call)+len(w.Outcome.Data)+len(w.Outcome.Error)+len(w.Settings))), nil
}

// append appends w as msgpack.Marshal encodes it (TestWireEncodesAsMsgpack):
// every record goes through here, and reflection was most of its cost.
func (w *wire) append(b []byte) []byte {
	// s, t, n, k, e, h and o, and those set
	b = pack.Map(b, 7+pack.Count(w.Call != "", w.Recorder != "", w.At != 0, len(w.RefSum) > 0, w.RefSize != 0, len(w.Settings) > 0))
	b = pack.Str(pack.Str(pack.Str(pack.Str(b, "s"), w.Session), "t"), w.Turn)
	b = pack.Int(pack.Str(b, "n"), w.Iteration)
	b = pack.Uint8(pack.Str(b, "k"), uint8(w.Kind))
	b = pack.Uint64(pack.Str(b, "e"), w.Effect)
	if w.Call != "" {
		b = pack.Str(pack.Str(b, "c"), w.Call)
	}
	b = pack.Bin(pack.Str(b, "h"), w.Hash)
	b = w.Outcome.append(pack.Str(b, "o"))
	if w.Recorder != "" {
		b = pack.Str(pack.Str(b, "r"), w.Recorder)
	}
	if w.At != 0 {
		b = pack.Int64(pack.Str(b, "a"), w.At)
	}
	if len(w.RefSum) > 0 {
		b = pack.Bin(pack.Str(b, "x"), w.RefSum)
	}
	if w.RefSize != 0 {
		b = pack.Int64(pack.Str(b, "z"), w.RefSize)
	}
	if len(w.Settings) > 0 {
		b = pack.Bin(pack.Str(b, "v"), w.Settings)
	}
	return b
}

func (o *Outcome) append(b []byte) []byte {
	b = pack.Map(b, pack.Count(len(o.Data) > 0, o.Failed, o.Error != "", o.Intends))
	if len(o.Data) > 0 {
		b = pack.Bin(pack.Str(b, "d"), o.Data)
	}
	if o.Failed {
		b = pack.Bool(pack.Str(b, "f"), true)
	}
	if o.Error != "" {
		b = pack.Str(pack.Str(b, "e"), o.Error)
	}
	if o.Intends {
		b = pack.Bool(pack.Str(b, "i"), true)
	}
	return b
}

func decode(b []byte, seq uint64) (*Record, error) {
	var w wire
	if err := msgpack.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%w: record %d: %v", ErrMalformed, seq, err)
	}
	if len(w.Hash) != len(turn.Hash{}) || w.Session == "" || w.Turn == "" || w.Effect == 0 {
		return nil, fmt.Errorf("%w: record %d lacks its key or hash", ErrMalformed, seq)
	}
	r := &Record{
		Key: turn.ReplayKey{Session: w.Session, Turn: w.Turn, Iteration: w.Iteration, Kind: w.Kind,
			Effect: turn.EffectID(w.Effect), Call: w.Call},
		Outcome: w.Outcome, Seq: seq, Recorder: w.Recorder, Settings: w.Settings,
	}
	copy(r.Hash[:], w.Hash)
	if w.RefSum != nil || w.RefSize != 0 {
		if len(w.RefSum) != 32 || w.RefSize <= 0 || len(w.Outcome.Data) != 0 {
			return nil, fmt.Errorf("%w: record %d has a malformed reference", ErrMalformed, seq)
		}
		r.Ref = &blobs.Ref{Size: w.RefSize}
		copy(r.Ref.Sum[:], w.RefSum)
	}
	if w.At != 0 {
		r.At = time.Unix(0, w.At)
	}
	return r, nil
}
