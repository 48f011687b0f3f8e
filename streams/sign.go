package streams

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Records are signed (ADR 0036): with the deployment's secret, a client
// signs every message it publishes on a subject of durable truth, and tells
// those from messages anyone else put there. On a server without
// permissions that is what keeps a plain client from writing truth.

// HeaderSignature carries a record's signature: the first 16 bytes of an
// HMAC-SHA256, under a key derived from the deployment's secret, of the
// subject the record is for and its payload, base64url without padding.
const HeaderSignature = "Lash-Sig"

// MinSecretBytes is the shortest deployment secret accepted.
const MinSecretBytes = 32

// ErrUnsigned: a record on a subject of durable truth carries no valid
// signature of the deployment: no node or operator wrote it.
var ErrUnsigned = errors.New("streams: not signed by the deployment")

// ErrSecretMismatch: the deployment signs its records under another
// secret than the one given, or this client has none.
var ErrSecretMismatch = errors.New("streams: the deployment's records are signed under another secret")

// signKey is the deployment's record key and the stream sequences up to
// which records were written before the deployment signed (trusted
// unsigned, so a deployment made before signing keeps its history).
type signKey struct {
	key   []byte
	since [numStreams]uint64
}

// secretKey is the deployment's stamp in the lease bucket: where each
// stream stood when its records began to be signed, and a MAC over that
// under the record key, so no one without the secret can move it.
const secretKey = "deployment.signing"

type signingStamp struct {
	Since map[string]uint64 `json:"since"`
	MAC   string            `json:"mac"`
}

// recordKey derives the key records are signed with from the deployment's
// secret, apart from any other use of the secret (event keys).
func recordKey(secret []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("lash record signatures v1"))
	return h.Sum(nil)
}

// Sign makes the client sign what it publishes on subjects of durable truth
// with the deployment's secret and check what it reads. The first client to
// sign a deployment stamps it (where each stream stands, so records from
// before are trusted as they are); a client whose secret is not the one the
// stamp was made with gets ErrSecretMismatch. Call it before the client is
// used.
func (c *Client) Sign(ctx context.Context, secret []byte) error {
	if len(secret) < MinSecretBytes {
		return fmt.Errorf("streams: a secret of %d bytes, at least %d", len(secret), MinSecretBytes)
	}
	k := &signKey{key: recordKey(secret)}
	stamp, err := c.readStamp(ctx)
	if errors.Is(err, ErrNotFound) {
		stamp, err = c.makeStamp(ctx, k)
	}
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(stamp.MAC), []byte(k.stampMAC(stamp.Since))) {
		return fmt.Errorf("%w: the secret given is not the one the deployment (prefix %q) was stamped with; every node and operator needs the same", ErrSecretMismatch, c.cfg.Prefix)
	}
	for s := Stream(0); s < numStreams; s++ {
		k.since[s] = stamp.Since[streamSuffix[s]]
	}
	c.signer.Store(k)
	return nil
}

// Signed reports whether the deployment signs its records: it was stamped
// by a client with its secret. A client without the secret cannot write
// its durable truth.
func (c *Client) Signed(ctx context.Context) (bool, error) {
	_, err := c.readStamp(ctx)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (c *Client) readStamp(ctx context.Context) (*signingStamp, error) {
	e, err := c.KVGet(ctx, secretKey)
	if err != nil {
		return nil, err
	}
	var s signingStamp
	if err := json.Unmarshal(e.Value, &s); err != nil {
		return nil, fmt.Errorf("%w: the deployment's signing stamp is unreadable: %v", ErrSecretMismatch, err)
	}
	return &s, nil
}

func (c *Client) makeStamp(ctx context.Context, k *signKey) (*signingStamp, error) {
	s := &signingStamp{Since: map[string]uint64{}}
	for st := Stream(0); st < numStreams; st++ {
		if st == Live {
			continue // no truth there
		}
		last, err := c.LastSeq(ctx, st)
		if errors.Is(err, ErrStreamMissing) && addedLater(st) {
			continue // made later, after the stamp: all it holds is signed
		}
		if err != nil {
			return nil, err
		}
		s.Since[streamSuffix[st]] = last
	}
	s.MAC = k.stampMAC(s.Since)
	v, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if _, err := c.KVCreate(ctx, secretKey, v, 0); err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) {
			return c.readStamp(ctx) // another client stamped it first
		}
		return nil, err
	}
	return s, nil
}

func (k *signKey) stampMAC(since map[string]uint64) string {
	h := hmac.New(sha256.New, k.key)
	h.Write([]byte("stamp"))
	for s, name := range streamSuffix {
		// A stream added after a deployment was stamped is not in its
		// stamp: everything on it was written since, so signed.
		if _, in := since[name]; !in && Stream(s) > Live {
			continue
		}
		fmt.Fprintf(h, "\x00%s=%d", name, since[name])
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// sig is the signature of data for subject.
func (k *signKey) sig(subject string, data []byte) string {
	h := hmac.New(sha256.New, k.key)
	h.Write([]byte(subject))
	h.Write([]byte{0})
	h.Write(data)
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:16])
}

// Truth reports whether subject carries durable truth, which only nodes and
// operators write (ADR 0028): session logs, snapshots and marks, journals
// and steps, processes, trigger records and timers. Inputs, decisions and
// signals are clients' to write.
func (s Subjects) Truth(subject string) bool {
	rest, ok := strings.CutPrefix(subject, s.prefix+".")
	if !ok {
		return false
	}
	kind, rest, _ := strings.Cut(rest, ".")
	switch kind {
	case "fx", "proc", "trig", "timer", "agent":
		return true
	case "sess":
		i := strings.LastIndexByte(rest, '.')
		switch rest[i+1:] {
		case "ev", "snap", "gone":
			return true
		}
	}
	return false
}

// sign adds the signature to m when the client signs and m's subject is
// durable truth. A schedule is signed for its target: the server copies
// its headers onto the message it fires. A client told the deployment
// signs (RefuseTruth) and holding no secret writes no truth.
func (c *Client) sign(m *nats.Msg) error {
	k := c.signer.Load()
	subject := m.Subject
	if t := m.Header.Get(jetstream.ScheduleTargetHeader); t != "" {
		subject = t
	}
	if !c.subj.Truth(subject) {
		return nil
	}
	if k == nil {
		if why := c.refuse.Load(); why != nil {
			return *why
		}
		return nil
	}
	m.Header.Set(HeaderSignature, k.sig(subject, m.Data))
	return nil
}

// Vouch signs p whatever its subject, when the client signs: for a record
// of a node that travels where clients write too (a node's notice among a
// session's inputs), whose reader checks it with Vouched.
func (c *Client) Vouch(p *Publication) {
	k := c.signer.Load()
	if k == nil {
		return
	}
	if p.Header == nil {
		p.Header = nats.Header{}
	}
	p.Header.Set(HeaderSignature, k.sig(vouchedName(p.Subject, p.MsgID), p.Data))
}

// vouchedName is what a vouched message's signature covers beside its
// data: its subject and its message id, so it cannot be published again
// under another id (as a new input), and a domain of its own, so no
// record's signature passes for it.
func vouchedName(subject, msgID string) string { return "vouched\x00" + subject + "\x00" + msgID }

// Vouched reports whether m carries the deployment's signature (Vouch);
// always true on a client that does not sign, whose deployment trusts
// whoever can write.
func (c *Client) Vouched(m *Msg) bool {
	k := c.signer.Load()
	if k == nil {
		return true
	}
	got := m.Header.Get(HeaderSignature)
	return got != "" && hmac.Equal([]byte(got), []byte(k.sig(vouchedName(m.Subject, m.MsgID()), m.Data)))
}

// VouchObject is the signature a signing client puts in the metadata of an
// object of durable truth that no message names (a saved program): over
// what the object is (name) and its sum. It is "" on a client that does
// not sign, and an error on one that refuses truth (RefuseTruth).
func (c *Client) VouchObject(name string, sum [32]byte) (string, error) {
	k := c.signer.Load()
	if k == nil {
		if why := c.refuse.Load(); why != nil {
			return "", *why
		}
		return "", nil
	}
	return k.sig("object\x00"+name, sum[:]), nil
}

// ObjectVouched reports whether sig is the deployment's for the object
// (VouchObject); always true on a client that does not sign.
func (c *Client) ObjectVouched(name string, sum [32]byte, sig string) bool {
	k := c.signer.Load()
	if k == nil {
		return true
	}
	return sig != "" && hmac.Equal([]byte(sig), []byte(k.sig("object\x00"+name, sum[:])))
}

// RefuseTruth makes writes on subjects of durable truth fail with why: for
// a client without the secret of a deployment that signs, whose writes
// every node would set aside.
func (c *Client) RefuseTruth(why error) { c.refuse.Store(&why) }

// Verify returns ErrUnsigned for a message on a subject of durable truth
// that carries no valid signature of the deployment, written after the
// deployment began to sign; nil otherwise, and always for a client that
// does not sign.
func (c *Client) Verify(m *Msg) error {
	k := c.signer.Load()
	if k == nil || !c.subj.Truth(m.Subject) {
		return nil
	}
	if s, ok := c.streamIndex(m.Subject); ok && m.Seq <= k.since[s] {
		return nil // written before the deployment signed
	}
	subject := m.Subject
	if t := m.Header.Get(jetstream.ScheduleTargetHeader); t != "" {
		subject = t // the schedule itself
	}
	got := m.Header.Get(HeaderSignature)
	if got == "" {
		return fmt.Errorf("%w: %s at %d has no signature", ErrUnsigned, m.Subject, m.Seq)
	}
	if !hmac.Equal([]byte(got), []byte(k.sig(subject, m.Data))) {
		return fmt.Errorf("%w: %s at %d has a signature that does not match", ErrUnsigned, m.Subject, m.Seq)
	}
	return nil
}

// SignedHead returns the last message on subject that passes Verify
// (ErrNotFound if none) and the subject's last sequence, whatever is
// there: the sequence a compare-and-set must name. Messages no node or
// operator wrote are passed over, and a write lands after them: they change
// nothing and block nothing. One leader read when the head is signed.
func (c *Client) SignedHead(ctx context.Context, subject string) (*Msg, uint64, error) {
	m, err := c.Head(ctx, subject)
	if err != nil {
		return nil, 0, err
	}
	if c.Verify(m) == nil {
		return m, m.Seq, nil
	}
	head := m.Seq
	var last *Msg
	err = c.Read(ctx, subject, 0, func(m *Msg) error {
		head = max(head, m.Seq)
		if c.Verify(m) == nil {
			last = m
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if last == nil {
		return nil, head, fmt.Errorf("%w: no signed record on %s", ErrNotFound, subject)
	}
	return last, head, nil
}

// Signs reports whether the client signs what it writes.
func (c *Client) Signs() bool { return c.signer.Load() != nil }
