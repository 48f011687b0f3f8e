package effectlog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// The hand-written encoding is msgpack's, byte for byte: records written
// before it and after it read the same, and either reads the other.
func TestWireEncodesAsMsgpack(t *testing.T) {
	long := strings.Repeat("x", 70000)
	for _, w := range []wire{
		{},
		{Session: "s", Turn: "t", Iteration: 3, Kind: turn.KindToolCall, Effect: 9, Hash: make([]byte, 32), At: 1700000000000000005},
		{Session: strings.Repeat("s", 31), Turn: strings.Repeat("t", 32), Iteration: -1, Kind: 255, Effect: 1 << 40, Call: "c1",
			Hash: []byte{}, Outcome: Outcome{Data: []byte("abc"), Failed: true, Error: "boom", Intends: true}, Recorder: "node-a",
			At: -5, RefSum: make([]byte, 32), RefSize: 1 << 33, Settings: []byte{1}},
		{Session: long, Turn: strings.Repeat("t", 300), Iteration: 1 << 20, Effect: 1, Call: strings.Repeat("c", 255),
			Outcome: Outcome{Data: []byte(long), Error: strings.Repeat("e", 256)}, Settings: make([]byte, 256)},
		{Iteration: -200, Outcome: Outcome{Data: make([]byte, 65535)}},
		{Iteration: -40000, Outcome: Outcome{Data: make([]byte, 65536)}},
		{Iteration: -3_000_000_000},
	} {
		if got, want := w.append(nil), mustMarshal(t, &w); !bytes.Equal(got, want) {
			t.Errorf("%.80v:\n got %x\nwant %x", w, head(got), head(want))
		}
	}
}

func FuzzWireEncodesAsMsgpack(f *testing.F) {
	f.Add("s", "t", 1, uint8(3), uint64(2), "c", []byte("h"), []byte("d"), false, "", true, "r", int64(5), []byte(nil), int64(0), []byte("v"))
	f.Fuzz(func(t *testing.T, s, tu string, it int, k uint8, e uint64, c string, h, d []byte, failed bool, errText string,
		intends bool, r string, at int64, sum []byte, size int64, settings []byte) {
		w := wire{Session: s, Turn: tu, Iteration: it, Kind: turn.Kind(k), Effect: e, Call: c, Hash: h,
			Outcome: Outcome{Data: d, Failed: failed, Error: errText, Intends: intends}, Recorder: r, At: at, RefSum: sum, RefSize: size, Settings: settings}
		if got, want := w.append(nil), mustMarshal(t, &w); !bytes.Equal(got, want) {
			t.Fatalf("got %x\nwant %x", head(got), head(want))
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func head(b []byte) []byte { return b[:min(len(b), 120)] }

// BenchmarkWire: a tool call's record, by hand and through reflection.
func BenchmarkWire(b *testing.B) {
	w := wire{Session: "session-1", Turn: "in-42", Iteration: 3, Kind: turn.KindToolCall, Effect: 9, Call: "call_abc123",
		Hash: make([]byte, 32), Outcome: Outcome{Data: make([]byte, 120)}, Recorder: "node-a/01JEXAMPLE", At: 1764050000000000000}
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			_ = w.append(make([]byte, 0, 256))
		}
	})
	b.Run("msgpack", func(b *testing.B) {
		for b.Loop() {
			_, _ = msgpack.Marshal(&w)
		}
	})
}
