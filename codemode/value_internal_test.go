package codemode

import (
	"encoding/json"
	"testing"
)

// Any JSON crosses into a program and back as JSON, and crossing again
// changes nothing: the same bytes make the same value in every run.
func FuzzValues(f *testing.F) {
	for _, s := range []string{`{"z":1,"a":[true,null,1.5,"s"]}`, `123456789012345678901234567890`, `"é\u0000"`, `[[[[]]]]`, `{"a":{"a":{}}}`, `-0.0`, `1e308`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := fromJSON(data)
		if err != nil {
			return // refused, with a reason: fine
		}
		once, err := toJSON(v, 1<<20)
		if err != nil {
			if !json.Valid(data) {
				t.Fatalf("fromJSON took invalid JSON %q", data)
			}
			return // a value past the bound, or a float JSON cannot write
		}
		if !json.Valid(once) {
			t.Fatalf("%q became invalid JSON %q", data, once)
		}
		v2, err := fromJSON(once)
		if err != nil {
			t.Fatalf("%q: its own encoding %q is refused: %v", data, once, err)
		}
		twice, err := toJSON(v2, 1<<20)
		if err != nil || string(twice) != string(once) {
			t.Fatalf("%q: %q then %q (%v)", data, once, twice, err)
		}
	})
}
