package pack

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Each value at the edges of its encodings is what msgpack writes for the
// Go value of the same type.
func TestEdgesAreMsgpacks(t *testing.T) {
	check := func(got []byte, v any) {
		t.Helper()
		want, err := msgpack.Marshal(v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%T %.40v: got %x, want %x (%v)", v, v, got[:min(len(got), 12)], want[:min(len(want), 12)], err)
		}
	}
	for _, n := range []int{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		check(Int(nil, n), n)
		check(Int64(nil, int64(n)), int64(n))
		check(Uint64(nil, uint64(n)), uint64(n))
	}
	for _, n := range []int{0, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("x", n)
		check(Str(nil, s), s)
		check(Bin(nil, []byte(s)), []byte(s))
	}
	check(Bin(nil, nil), []byte(nil))
	for _, f := range []float64{0, 0.7, -1, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(-1), 1e-300} {
		check(Float64(nil, f), f)
	}
	check(Uint8(nil, 200), uint8(200))
	check(Bool(Bool(nil, true), false)[:1], true)
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		if got, want := Array(nil, n), arrayHeader(t, n); !bytes.Equal(got, want) {
			t.Errorf("array of %d: got %x, want %x", n, got, want)
		}
		if got, want := Map(nil, n), mapHeader(t, n); !bytes.Equal(got, want) {
			t.Errorf("map of %d: got %x, want %x", n, got, want)
		}
	}
}

func arrayHeader(t *testing.T, n int) []byte {
	var buf bytes.Buffer
	if err := msgpack.NewEncoder(&buf).EncodeArrayLen(n); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mapHeader(t *testing.T, n int) []byte {
	var buf bytes.Buffer
	if err := msgpack.NewEncoder(&buf).EncodeMapLen(n); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCount(t *testing.T) {
	if Count() != 0 || Count(true, false, true) != 2 {
		t.Fatal("Count")
	}
}
