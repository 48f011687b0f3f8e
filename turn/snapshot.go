package turn

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// A snapshot is snapshotMagic, one version byte, then the msgpack encoding of
// the machine's state. Structs encode with their fields in declaration order
// and the state holds no maps, so equal states give equal bytes.
const (
	snapshotMagic   = "lashturn"
	SnapshotVersion = 2
)

var (
	// ErrSnapshot: the bytes are not a snapshot this version can read.
	ErrSnapshot = errors.New("turn: invalid snapshot")
	// ErrSnapshotVersion: the snapshot was written by a newer version.
	ErrSnapshotVersion = errors.New("turn: unsupported snapshot version")
)

// maxCount bounds every counter a snapshot may hold: far beyond any real
// turn, far below overflow.
const maxCount = 1 << 32

// canonicalHash hashes an effect kind and its request. The encoding is
// msgpack of structs and slices only; maps would make it vary.
func canonicalHash(k Kind, req any) Hash {
	he := hashers.Get().(*hashEncoder)
	defer hashers.Put(he)
	he.h.Reset()
	he.h.Write([]byte{byte(k)})
	if err := he.enc.Encode(req); err != nil {
		// Requests are plain structs of strings, numbers and slices; an
		// encoding failure is a bug, not an input error.
		panic(fmt.Sprintf("turn: encoding %s request: %v", k, err))
	}
	var sum Hash
	he.h.Sum(sum[:0])
	return sum
}

// hashEncoder encodes straight into a hash: no copy of the request, and
// pooled, since every effect is hashed.
type hashEncoder struct {
	h   hash.Hash
	enc *msgpack.Encoder
}

var hashers = sync.Pool{New: func() any {
	h := sha256.New()
	return &hashEncoder{h: h, enc: msgpack.NewEncoder(h)}
}}

// Snapshot encodes the machine's whole state. Restore with the same Config
// yields the outstanding effect again, with the same id and request.
func (m *Machine) Snapshot() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(snapshotMagic)
	buf.WriteByte(SnapshotVersion)
	if err := msgpack.NewEncoder(&buf).Encode(&m.st); err != nil {
		return nil, fmt.Errorf("turn: encoding snapshot: %w", err)
	}
	return buf.Bytes(), nil
}

// Restore rebuilds a machine from a snapshot. Garbage, truncated or
// newer-version bytes return an error.
func Restore(cfg Config, b []byte) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidStart, err)
	}
	if len(b) < len(snapshotMagic)+1 || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: missing header", ErrSnapshot)
	}
	if v := b[len(snapshotMagic)]; v != SnapshotVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrSnapshotVersion, v, SnapshotVersion)
	}
	body := b[len(snapshotMagic)+1:]
	// A structural pass first: the decoder sizes slices from their declared
	// length, so a forged length must be proven by bytes actually present
	// before anything is allocated for it.
	r := bytes.NewReader(body)
	if err := msgpack.NewDecoder(r).Skip(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrSnapshot, r.Len())
	}
	m := &Machine{cfg: cfg.withDefaults()}
	d := msgpack.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields(true)
	if err := d.Decode(&m.st); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if err := m.st.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if (Digest{}).Extend(m.st.Messages[:m.st.HistoryLen]...) != m.st.HistoryDigest {
		return nil, fmt.Errorf("%w: the history digest does not match the history", ErrSnapshot)
	}
	// Only the canonical encoding is accepted: this also refuses numbers
	// that the decoder silently narrowed into one-byte fields.
	if again, err := msgpack.Marshal(&m.st); err != nil || !bytes.Equal(again, body) {
		return nil, fmt.Errorf("%w: not in canonical form", ErrSnapshot)
	}
	m.out = m.build()
	return m, nil
}

// check verifies the invariants every reachable state keeps. Restore runs it
// on decoded bytes; tests run it after every step.
func (st *state) check() error {
	switch {
	case st.Session == "" || st.Turn == "":
		return errors.New("session and turn ids are required")
	case st.Phase < phaseSync || st.Phase > phaseDone:
		return fmt.Errorf("unknown phase %d", st.Phase)
	case st.Status < StatusRunning || st.Status > StatusDone:
		return fmt.Errorf("unknown run status %d", st.Status)
	case st.NextID < 1 || st.NextID > maxCount:
		return fmt.Errorf("next effect id %d is out of range", st.NextID)
	case st.Iteration > maxCount || st.Round > maxCount || st.Failures > maxCount || st.Fresh > maxCount ||
		st.Attempt > maxCount || st.OutIter > maxCount:
		return errors.New("counter out of range")
	case st.Phase != phaseDone && (st.Out == 0 || st.Out >= st.NextID):
		return fmt.Errorf("outstanding effect %d is not below next id %d", st.Out, st.NextID)
	case st.HistoryLen < 0 || st.HistoryLen > len(st.Messages):
		return fmt.Errorf("history length %d exceeds %d messages", st.HistoryLen, len(st.Messages))
	case st.SentMsgs < 0 || st.SentMsgs > len(st.Messages) || st.SentEvents < 0 || st.SentEvents > len(st.Events):
		return errors.New("progress cursor beyond the log")
	case st.Iteration < 0 || st.Round < 0 || st.Failures < 0 || st.Fresh < 0 || st.OutIter < 0 || st.OutIter > st.Iteration:
		return errors.New("negative or inconsistent counter")
	}
	for i, msg := range st.Messages {
		if !msg.Role.valid() {
			return fmt.Errorf("message %d has unknown role %d", i, msg.Role)
		}
	}
	if r := st.Request; r != nil {
		// A request holds the system prompt, if any, and the messages.
		if pre := len(r.Messages) - len(st.Messages); pre < 0 || pre > 1 {
			return fmt.Errorf("a request of %d messages for %d", len(r.Messages), len(st.Messages))
		}
	}
	for _, q := range st.Queue {
		if q.Kind != KindProgress && !(q.Kind == KindEmit && len(q.Events) == 1) {
			return fmt.Errorf("queued effect of kind %s", q.Kind)
		}
	}
	seen := map[string]bool{}
	inBatch := 0
	for _, c := range st.Calls {
		if c.Call.ID == "" || seen[c.Call.ID] {
			return fmt.Errorf("call id %q is empty or repeated", c.Call.ID)
		}
		seen[c.Call.ID] = true
		if c.Status < CallNew || c.Status > CallCancelled || c.Round > st.Round {
			return fmt.Errorf("call %q has status %d in round %d", c.Call.ID, c.Status, c.Round)
		}
		if c.Exec {
			if c.Round != st.Round {
				return fmt.Errorf("call %q runs in an old round", c.Call.ID)
			}
			inBatch++
		}
		if c.Result != nil && (c.Result.CallID != c.Call.ID || c.Result.Status < ToolOK || c.Result.Status > ToolPending) {
			return fmt.Errorf("call %q has a malformed result", c.Call.ID)
		}
		if err := c.checkProgram(); err != nil {
			return err
		}
	}
	if err := st.checkExec(); err != nil {
		return err
	}
	switch st.Phase {
	case phaseLLM:
		if st.Request == nil || st.Attempt < 1 {
			return errors.New("waiting for a model call without its request")
		}
	case phaseSleep:
		if st.Request == nil || st.Attempt < 1 || st.SleepFor < 0 {
			return errors.New("retry sleep without the request it retries")
		}
	case phaseCheckpoint:
		if st.At != AfterTools && st.At != BeforeFinish {
			return fmt.Errorf("unknown checkpoint kind %d", st.At)
		}
	case phaseTools:
		if inBatch == 0 {
			return errors.New("waiting for a tool batch with no calls")
		}
	case phaseAwait:
		if st.AwaitFor <= 0 {
			return errors.New("await without a timeout")
		}
	case phaseDone:
		if st.Term.Reason < NaturalEnd || st.Term.Reason > Error {
			return fmt.Errorf("finished without a valid reason (%d)", st.Term.Reason)
		}
	}
	if st.Phase != phaseTools && inBatch > 0 {
		return errors.New("calls marked running outside a tool batch")
	}
	return nil
}
