package sessionlog

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestDecodeEntryRefusesWhatItDidNotWrite(t *testing.T) {
	good := &Entry{Kind: KindCommit, Token: 3, Turn: "t1", Body: []byte("body")}
	good.Hash = ContentHash(good.Body)
	b, err := encodeEntry(good)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := decodeEntry(b); err != nil || e.Turn != "t1" || e.Stamp() != good.Stamp() {
		t.Fatalf("round trip: %+v %v", e, err)
	}
	fence := &Entry{Kind: KindFence, Token: 4, Owner: "n", SetAside: []uint64{2, 3}}
	if b, err = encodeEntry(fence); err != nil {
		t.Fatal(err)
	}
	if e, err := decodeEntry(b); err != nil || len(e.SetAside) != 2 || e.SetAside[1] != 3 {
		t.Fatalf("fence round trip: %+v %v", e, err)
	}
	bad := map[string]*Entry{
		"too much set aside": {Kind: KindFence, Token: 1, SetAside: make([]uint64, MaxSetAside+1)},
		"unknown kind":       {Kind: 9, Token: 1},
		"no token":           {Kind: KindFence},
		"commit, no turn":    {Kind: KindCommit, Token: 1, Hash: ContentHash(nil)},
		"hash of the body":   {Kind: KindCommit, Token: 1, Turn: "t", Body: []byte("x"), Hash: ContentHash([]byte("y"))},
	}
	for name, e := range bad {
		b, _ := msgpack.Marshal(e)
		if _, err := decodeEntry(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
	for _, garbage := range [][]byte{nil, {0xc1}, []byte("not msgpack at all"), {0x92, 0x01}} {
		if _, err := decodeEntry(garbage); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", garbage, err)
		}
	}
}
