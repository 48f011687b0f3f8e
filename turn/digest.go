package turn

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"fmt"
	"hash"
)

// RequestHashing names how the machine hashes requests. It changes when a
// request hash would: journals recorded under another way cannot be
// replayed (1: the whole model request encoded; 2: the history by its
// Digest).
const RequestHashing = 2

// Digest is a running hash over a conversation's messages: the digest of
// no messages is all zeros, and Extend folds in more, each by its
// canonical encoding. A driver that keeps a long session in memory keeps
// its history's digest along (Start.HistoryDigest), and the machine keeps
// the digest of the turn's messages from one model request to the next, so
// that hashing a request costs in proportion to the messages since the last
// one, not the session's or the turn's length.
type Digest [32]byte

// Extend returns the digest of the messages d covers followed by msgs.
func (d Digest) Extend(msgs ...Message) Digest {
	if len(msgs) == 0 {
		return d
	}
	var buf []byte
	h := sha256.New()
	for i := range msgs {
		buf = appendMessage(buf[:0], &msgs[i])
		h.Reset()
		h.Write(d[:])
		h.Write(buf)
		h.Sum(d[:0])
	}
	return d
}

// llmRequestHash is what an LLMCall's hash covers: the request without its
// messages, the messages before the history (the system prompt), the
// history by its digest and length, and the turn's own messages one by one.
func (m *Machine) llmRequestHash(req *ModelRequest) Hash {
	st := &m.st
	pre := len(req.Messages) - len(st.Messages)
	h := m.headHash(req)
	buf := AppendMessages(make([]byte, 0, 256), req.Messages[:pre])
	buf = append(buf, st.HistoryDigest[:]...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(st.HistoryLen))
	own := req.Messages[pre+st.HistoryLen:]
	rest, from := st.HistoryDigest, 0
	if m.ownN > 0 && m.ownN <= len(own) {
		rest, from = m.own, m.ownN
	}
	rest = rest.Extend(own[from:]...)
	m.own, m.ownN = rest, len(own)
	buf = append(buf, rest[:]...)
	h.Write(buf)
	var sum Hash
	h.Sum(sum[:0])
	return sum
}

// headHash is a hash that has taken in the kind and the request without
// its messages. The model and sampling are the machine's configuration and
// the tools are synced once a turn, so the state after them is kept and
// copied, not computed again for every call: tools' schemas can be large.
func (m *Machine) headHash(req *ModelRequest) hash.Hash {
	same := m.headState != nil && len(req.Tools) == len(m.headTools) && req.Model == m.headModel &&
		(len(req.Tools) == 0 || &req.Tools[0] == &m.headTools[0])
	if !same {
		h := sha256.New()
		h.Write(appendRequestHead([]byte{byte(KindLLMCall)}, req))
		state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			panic(fmt.Sprintf("turn: keeping a hash's state: %v", err))
		}
		m.headState, m.headTools, m.headModel = state, req.Tools, req.Model
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.headState); err != nil {
		panic(fmt.Sprintf("turn: restoring a hash's state: %v", err))
	}
	return h
}
