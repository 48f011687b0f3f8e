package effectlog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/turn"
)

func TestRecordRoundTripAndMalformed(t *testing.T) {
	key := turn.ReplayKey{Session: "s", Turn: "t", Iteration: 2, Kind: turn.KindToolCall, Effect: 7, Call: "c1"}
	hash := turn.Hash{1, 2, 3}
	at := time.Unix(1700000000, 5)
	b, err := encode(key, hash, Outcome{Failed: true, Error: "boom"}, nil, "node-a", nil, at)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decode(b, 42)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Key != key || rec.Hash != hash || !rec.Outcome.Failed || rec.Outcome.Error != "boom" ||
		rec.Seq != 42 || rec.Recorder != "node-a" || !rec.At.Equal(at) {
		t.Fatalf("round trip: %+v", rec)
	}
	for _, garbage := range [][]byte{nil, {0xc1}, []byte("plain text")} {
		if _, err := decode(garbage, 1); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", garbage, err)
		}
	}
	noKey, _ := encode(turn.ReplayKey{}, hash, Outcome{}, nil, "", nil, at)
	if _, err := decode(noKey, 1); !errors.Is(err, ErrMalformed) {
		t.Errorf("record without a key: got %v, want ErrMalformed", err)
	}
}

func TestNondeterminismErrorNamesKeyAndHashes(t *testing.T) {
	key := turn.ReplayKey{Session: "s", Turn: "t", Iteration: 1, Kind: turn.KindLLMCall, Effect: 2}
	err := error(&NondeterminismError{Key: key, Recorded: turn.Hash{0xaa}, Current: turn.Hash{0xbb}})
	if !errors.Is(err, ErrNondeterminism) {
		t.Fatal("does not match ErrNondeterminism")
	}
	for _, want := range []string{"lash:nondeterminism", key.String(), turn.Hash{0xaa}.String(), turn.Hash{0xbb}.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
