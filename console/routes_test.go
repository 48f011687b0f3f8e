package console

import (
	"errors"
	"net/url"
	"slices"
	"testing"
)

func argvOf(t *testing.T, pattern string, r Request) ([]string, error) {
	t.Helper()
	for _, rt := range routes {
		if rt.pattern == pattern {
			return rt.argv(r)
		}
	}
	t.Fatalf("no route %s", pattern)
	return nil, nil
}

// A path value or query value never becomes a flag or a second argument:
// positional arguments come after "--", flag values after "=".
func TestRoutesKeepValuesInPlace(t *testing.T) {
	got, _ := argvOf(t, "GET /api/sessions/{id}", Request{Path: map[string]string{"id": "--read-only"}})
	if want := []string{"sessions", "show", "--", "--read-only"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	got, _ = argvOf(t, "GET /api/sessions", Request{Query: url.Values{"state": {"waiting --limit 1"}, "after": {"s 2"}, "evil": {"x"}}})
	if want := []string{"sessions", "ls", "--state=waiting --limit 1", "--after=s 2"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	got, _ = argvOf(t, "GET /api/sessions/{id}/turns/{turn}/effects", Request{Path: map[string]string{"id": "s1", "turn": "-h"}})
	if want := []string{"effects", "--", "s1", "-h"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
}

// Decisions: approve is resume, deny is cancel, anything else is refused
// before lash-admin runs.
func TestDecisionRoute(t *testing.T) {
	const p = "POST /api/sessions/{id}/decide"
	path := map[string]string{"id": "s2"}
	got, err := argvOf(t, p, Request{Path: path, Body: []byte(`{"call_id":"call_1","action":"approve","key":"k1"}`)})
	if want := []string{"decide", "--key=k1", "--", "s2", "call_1", "resume"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("%q %v, want %q", got, err, want)
	}
	got, err = argvOf(t, p, Request{Path: path, Body: []byte(`{"call_id":"--mode=x","action":"deny"}`)})
	if want := []string{"decide", "--", "s2", "--mode=x", "cancel"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("%q %v, want %q", got, err, want)
	}
	for _, body := range []string{``, `{`, `{"call_id":"c","action":"resume"}`, `{"action":"approve"}`,
		`{"call_id":"c","action":"approve","mode":"use-result"}`, `[]`} {
		if _, err := argvOf(t, p, Request{Path: path, Body: []byte(body)}); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want a bad request", body, err)
		}
	}
	var writes []string
	for _, rt := range routes {
		if rt.write {
			writes = append(writes, rt.pattern)
		}
	}
	if !slices.Equal(writes, []string{p}) {
		t.Fatalf("writes: %q", writes)
	}
}
