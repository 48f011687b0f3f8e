package ledger

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLedgerSurvivesCutShortLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	if err := os.WriteFile(path, []byte(`{"key":"a","entry":"x"}`+"\n"+`{"key":"b","ent`), 0o644); err != nil {
		t.Fatal(err)
	}
	l := New(path)
	for _, tc := range []struct {
		key  string
		want bool
	}{{"a", false}, {"b", true}, {"b", false}} {
		applied, err := l.Append(tc.key, "y")
		if err != nil || applied != tc.want {
			t.Errorf("append(%q) = %v, %v; want %v", tc.key, applied, err, tc.want)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"key":"a","entry":"x"}` + "\n" + `{"key":"b","ent` + "\n" + `{"key":"b","entry":"y"}` + "\n"
	if string(data) != want {
		t.Errorf("ledger:\n%s\nwant:\n%s", data, want)
	}
}
