package sessionlog

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/internal/pack"
	"github.com/vmihailenco/msgpack/v5"
)

// Kind is the type of a session log entry.
type Kind uint8

const (
	// KindFence marks the start of a new holder's writes; entries before
	// it were written by older holders.
	KindFence Kind = iota + 1
	// KindCommit is a finished turn.
	KindCommit
	// KindConsume consumes inputs that start no turn (duplicates and
	// refused inputs), with the reason for each.
	KindConsume
)

func (k Kind) String() string {
	switch k {
	case KindFence:
		return "fence"
	case KindCommit:
		return "commit"
	case KindConsume:
		return "consume"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Entry is one message of a session's event log. Every entry carries the
// fencing token of the lease holder that wrote it.
type Entry struct {
	Kind  Kind   `msgpack:"k"`
	Token uint64 `msgpack:"t"`
	// Owner names the holder, for operators.
	Owner string `msgpack:"o,omitempty"`
	// Turn, Hash and Body are set on commits and consumes: Turn is the
	// turn id (or the id of what a consume consumed), Hash the sha256 of
	// the body. A body above the inline size is kept in the object store
	// under Hash: Body is then empty and BodySize its length.
	Turn     string   `msgpack:"u,omitempty"`
	Hash     [32]byte `msgpack:"h,omitempty"`
	Body     []byte   `msgpack:"b,omitempty"`
	BodySize int64    `msgpack:"z,omitempty"`
	// Settings is the fingerprint of the turn settings of the writer (on
	// fences and commits): which settings a turn ran under.
	Settings []byte `msgpack:"s,omitempty"`
	// SetAside, on a fence, lists revisions of entries before it that the
	// writer passed over as no lease's (their token above every lease's),
	// at most MaxSetAside: read models set them aside where operators look.
	SetAside []uint64 `msgpack:"a,omitempty"`
}

// MaxSetAside bounds the revisions one fence lists in SetAside.
const MaxSetAside = 64

// ByRef reports whether the entry's body is kept by reference.
func (e *Entry) ByRef() bool { return e.BodySize > 0 }

// BodyRef is the reference of a body kept by reference.
func (e *Entry) BodyRef() blobs.Ref { return blobs.Ref{Sum: e.Hash, Size: e.BodySize} }

// Stamp is a commit's identity: the turn and the hash of its content.
type Stamp struct {
	Turn string
	Hash [32]byte
}

// Stamp returns the commit stamp of a commit entry.
func (e *Entry) Stamp() Stamp { return Stamp{Turn: e.Turn, Hash: e.Hash} }

// ContentHash is the hash a commit's body is stamped with.
func ContentHash(body []byte) [32]byte { return sha256.Sum256(body) }

// encodeEntry encodes e as msgpack.Marshal does (TestEntryEncodesAsMsgpack),
// by hand: every turn writes two entries, and reflection was most of
// their cost.
func encodeEntry(e *Entry) ([]byte, error) {
	n := 3 + pack.Count(e.Owner != "", e.Turn != "", len(e.Body) > 0, e.BodySize != 0, len(e.Settings) > 0, len(e.SetAside) > 0) // k, t, h and those set
	b := make([]byte, 0, 96+len(e.Owner)+len(e.Turn)+len(e.Body)+len(e.Settings)+9*len(e.SetAside))
	b = pack.Map(b, n)
	b = pack.Uint8(pack.Str(b, "k"), uint8(e.Kind))
	b = pack.Uint64(pack.Str(b, "t"), e.Token)
	if e.Owner != "" {
		b = pack.Str(pack.Str(b, "o"), e.Owner)
	}
	if e.Turn != "" {
		b = pack.Str(pack.Str(b, "u"), e.Turn)
	}
	b = pack.Bin(pack.Str(b, "h"), e.Hash[:])
	if len(e.Body) > 0 {
		b = pack.Bin(pack.Str(b, "b"), e.Body)
	}
	if e.BodySize != 0 {
		b = pack.Int64(pack.Str(b, "z"), e.BodySize)
	}
	if len(e.Settings) > 0 {
		b = pack.Bin(pack.Str(b, "s"), e.Settings)
	}
	if len(e.SetAside) > 0 {
		b = pack.Array(pack.Str(b, "a"), len(e.SetAside))
		for _, r := range e.SetAside {
			b = pack.Uint64(b, r)
		}
	}
	return b, nil
}

// decodeEntry reads an entry and checks it is one this version writes. It
// walks the encoding by hand: projections decode every commit of every
// session, and reflection was most of their cost.
func decodeEntry(b []byte) (*Entry, error) {
	var e Entry
	r := bytes.NewReader(b)
	d := msgpack.GetDecoder()
	defer msgpack.PutDecoder(d)
	d.Reset(r)
	if err := readEntry(d, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, r.Len())
	}
	hasBody := e.Kind == KindCommit || e.Kind == KindConsume
	switch {
	case e.Kind < KindFence || e.Kind > KindConsume:
		return nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, e.Kind)
	case e.Token == 0:
		return nil, fmt.Errorf("%w: %s without a fencing token", ErrMalformed, e.Kind)
	case len(e.Settings) != 0 && len(e.Settings) != 32:
		return nil, fmt.Errorf("%w: settings fingerprint of %d bytes", ErrMalformed, len(e.Settings))
	case hasBody && e.Turn == "":
		return nil, fmt.Errorf("%w: %s without an id", ErrMalformed, e.Kind)
	case hasBody && e.BodySize < 0, hasBody && e.BodySize > 0 && len(e.Body) != 0:
		return nil, fmt.Errorf("%w: %s with a body both inline and by reference", ErrMalformed, e.Kind)
	case hasBody && e.BodySize == 0 && e.Hash != ContentHash(e.Body):
		return nil, fmt.Errorf("%w: %s with a body that does not match its hash", ErrMalformed, e.Kind)
	}
	return &e, nil
}

// readSeqs reads SetAside: at most MaxSetAside revisions.
func readSeqs(d *msgpack.Decoder) ([]uint64, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	if n > MaxSetAside {
		return nil, fmt.Errorf("%d revisions, at most %d", n, MaxSetAside)
	}
	out := make([]uint64, n)
	for i := range out {
		if out[i], err = d.DecodeUint64(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readEntry(d *msgpack.Decoder, e *Entry) error {
	return DecodeMap(d, func(k string) (err error) {
		switch k {
		case "k":
			var v uint8
			v, err = d.DecodeUint8()
			e.Kind = Kind(v)
		case "t":
			e.Token, err = d.DecodeUint64()
		case "o":
			e.Owner, err = d.DecodeString()
		case "u":
			e.Turn, err = d.DecodeString()
		case "h":
			err = DecodeHash(d, &e.Hash)
		case "b":
			e.Body, err = d.DecodeBytes()
		case "z":
			e.BodySize, err = d.DecodeInt64()
		case "s":
			e.Settings, err = d.DecodeBytes()
		case "a":
			e.SetAside, err = readSeqs(d)
		default:
			err = d.Skip()
		}
		return err
	})
}

// DecodeMap calls field for each key of a msgpack map; field reads the
// value. For the readers written by hand, here and in read models.
func DecodeMap(d *msgpack.Decoder, field func(key string) error) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	for range max(n, 0) {
		k, err := d.DecodeString()
		if err != nil {
			return err
		}
		if err := field(k); err != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
	}
	return nil
}

// DecodeHash reads a sha256 written as msgpack bytes into h: anything but
// 32 bytes is an error.
func DecodeHash(d *msgpack.Decoder, h *[32]byte) error {
	b, err := d.DecodeBytes()
	if err == nil && len(b) != len(h) {
		err = fmt.Errorf("hash of %d bytes", len(b))
	}
	copy(h[:], b)
	return err
}
