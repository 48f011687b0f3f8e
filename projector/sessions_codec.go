package projector

import (
	"bytes"
	"fmt"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// bodySummary is what the head and the turn list need from a commit's
// body (a sessionlog.TurnBody). It is read by hand, skipping over the
// messages: the turn's value keeps the body's bytes as they are, and
// reflection was most of a rebuild's cost.
type bodySummary struct {
	Outcome struct {
		Status      turn.RunStatus
		Termination turn.Termination
		Messages    int
		Suspended   int
		Usage       turn.Usage
		Iterations  int
	}
	InputCursor uint64
	Inputs      []sessionlog.InputUse
	Agent       string
	Labels      []sessionlog.Label
}

func (b *bodySummary) decode(data []byte) error {
	r := bytes.NewReader(data)
	d := msgpack.GetDecoder()
	defer msgpack.PutDecoder(d)
	d.Reset(r)
	err := sessionlog.DecodeMap(d, func(k string) (err error) {
		switch k {
		case "o":
			return sessionlog.DecodeMap(d, b.outcomeField(d))
		case "c":
			b.InputCursor, err = d.DecodeUint64()
			return err
		case "i":
			b.Inputs, err = decodeInputUses(d)
			return err
		case "a":
			b.Agent, err = d.DecodeString()
			return err
		case "l":
			return d.Decode(&b.Labels)
		}
		return d.Skip()
	})
	if err == nil && r.Len() != 0 {
		err = fmt.Errorf("%d trailing bytes", r.Len())
	}
	return err
}

func (b *bodySummary) outcomeField(d *msgpack.Decoder) func(string) error {
	o := &b.Outcome
	return func(k string) (err error) {
		switch k {
		case "Status":
			var v uint8
			v, err = d.DecodeUint8()
			o.Status = turn.RunStatus(v)
		case "Termination":
			err = d.Decode(&o.Termination)
		case "Messages":
			o.Messages, err = skipArray(d)
		case "Suspended":
			o.Suspended, err = skipArray(d)
		case "Usage":
			err = sessionlog.DecodeMap(d, func(k string) (err error) {
				switch k {
				case "i":
					o.Usage.InputTokens, err = d.DecodeInt64()
				case "o":
					o.Usage.OutputTokens, err = d.DecodeInt64()
				case "r":
					o.Usage.CacheReadTokens, err = d.DecodeInt64()
				case "w":
					o.Usage.CacheWriteTokens, err = d.DecodeInt64()
				case "x":
					o.Usage.ReasoningTokens, err = d.DecodeInt64()
				default:
					err = d.Skip()
				}
				return err
			})
		case "Iterations":
			o.Iterations, err = d.DecodeInt()
		default:
			err = d.Skip()
		}
		return err
	}
}

// encodeTurnInfo writes TurnInfo as msgpack.Marshal would, by hand: one is
// written for every commit during a rebuild.
func encodeTurnInfo(t *TurnInfo) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(160 + len(t.Body) + len(t.Turn))
	e := msgpack.GetEncoder()
	defer msgpack.PutEncoder(e)
	e.Reset(&buf)
	w := fieldWriter{e: e}
	w.err = e.EncodeMapLen(12 + b2i(len(t.Settings) > 0) + b2i(t.ByRef))
	w.str("t", t.Turn)
	w.int("n", int64(t.Ordinal))
	w.uint("s", t.Seq)
	w.key("h")
	w.do(e.EncodeBytes(t.Hash[:]))
	w.uint("k", t.Token)
	w.uint("st", uint64(t.Status))
	// Termination and Usage as their msgpack tags lay them out.
	term := t.Termination
	w.key("term")
	w.do(e.EncodeMapLen(1 + b2i(term.Code != "") + b2i(term.Detail != "")))
	w.uint("r", uint64(term.Reason))
	if term.Code != "" {
		w.str("c", term.Code)
	}
	if term.Detail != "" {
		w.str("d", term.Detail)
	}
	w.key("use")
	u := t.Usage
	w.do(e.EncodeMapLen(2 + b2i(u.CacheReadTokens != 0) + b2i(u.CacheWriteTokens != 0) + b2i(u.ReasoningTokens != 0)))
	w.int("i", u.InputTokens)
	w.int("o", u.OutputTokens)
	if u.CacheReadTokens != 0 {
		w.int("r", u.CacheReadTokens)
	}
	if u.CacheWriteTokens != 0 {
		w.int("w", u.CacheWriteTokens)
	}
	if u.ReasoningTokens != 0 {
		w.int("x", u.ReasoningTokens)
	}
	w.int("it", int64(t.Iterations))
	w.int("fm", int64(t.FirstMessage))
	w.int("m", int64(t.Messages))
	w.key("b")
	if len(t.Body) == 0 {
		w.do(e.EncodeNil())
	} else if w.err == nil {
		buf.Write(t.Body) // already msgpack
	}
	if len(t.Settings) > 0 {
		w.key("v")
		w.do(e.EncodeBytes(t.Settings))
	}
	if t.ByRef {
		w.key("r")
		w.do(e.EncodeBool(true))
	}
	return buf.Bytes(), w.err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fieldWriter writes map entries, keeping the first error.
type fieldWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *fieldWriter) do(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *fieldWriter) key(k string) {
	if w.err == nil {
		w.err = w.e.EncodeString(k)
	}
}

func (w *fieldWriter) str(k, v string) {
	w.key(k)
	if w.err == nil {
		w.err = w.e.EncodeString(v)
	}
}

func (w *fieldWriter) int(k string, v int64) {
	w.key(k)
	if w.err == nil {
		w.err = w.e.EncodeInt(v)
	}
}

func (w *fieldWriter) uint(k string, v uint64) {
	w.key(k)
	if w.err == nil {
		w.err = w.e.EncodeUint(v)
	}
}

// skipArray reads past a msgpack array and returns its length.
func skipArray(d *msgpack.Decoder) (int, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	for range max(n, 0) {
		if err := d.Skip(); err != nil {
			return 0, err
		}
	}
	return max(n, 0), nil
}

// decodeInputUses reads a []sessionlog.InputUse by hand, as bodySummary
// reads the rest of a body.
func decodeInputUses(d *msgpack.Decoder) ([]sessionlog.InputUse, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	// The length is the message's word, not a promise: grown as elements
	// come, a forged length fails at the end of the bytes instead of
	// asking for gigabytes first.
	out := make([]sessionlog.InputUse, 0, min(n, 1024))
	for range n {
		out = append(out, sessionlog.InputUse{})
		u := &out[len(out)-1]
		err := sessionlog.DecodeMap(d, func(k string) (err error) {
			switch k {
			case "s":
				u.Seq, err = d.DecodeUint64()
			case "k":
				u.Key, err = d.DecodeString()
			case "h":
				err = sessionlog.DecodeHash(d, &u.Hash)
			case "d":
				u.Duplicate, err = d.DecodeUint64()
			case "r":
				u.Refused, err = d.DecodeString()
			default:
				err = d.Skip()
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
