package turn

import (
	"bytes"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// CallError is journaled: RetryAfter travels under its own short key, and
// an error journaled before it existed still decodes, with no wait.
func TestCallErrorRetryAfterIsJournaled(t *testing.T) {
	in := CallError{Retryable: true, Code: "rate_limit_exceeded", Message: "429 slow down", RetryAfter: 7 * time.Second}
	b, err := msgpack.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"r", "c", "m", "ra"} {
		if !bytes.Contains(b, append([]byte{0xa0 | byte(len(key))}, key...)) {
			t.Fatalf("encoding %x has no key %q", b, key)
		}
	}
	var out CallError
	if err := msgpack.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}

	old, err := msgpack.Marshal(map[string]any{"r": true, "c": "http_503", "m": "503 busy"})
	if err != nil {
		t.Fatal(err)
	}
	out = CallError{}
	if err := msgpack.Unmarshal(old, &out); err != nil {
		t.Fatal(err)
	}
	if want := (CallError{Retryable: true, Code: "http_503", Message: "503 busy"}); out != want {
		t.Fatalf("old journal entry decodes to %+v, want %+v", out, want)
	}
	// No wait asked, no key written: entries without one stay byte-identical.
	plain, _ := msgpack.Marshal(&CallError{Retryable: true, Code: "x"})
	if bytes.Contains(plain, []byte("\xa2ra")) {
		t.Fatalf("a zero RetryAfter is encoded: %x", plain)
	}
}
