package streams

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestTokenKeepsPlainIDs(t *testing.T) {
	for _, id := range []string{"s1", "session_42", "A-b-C"} {
		if tok, err := Token(id); err != nil || tok != id {
			t.Errorf("Token(%q) = %q, %v", id, tok, err)
		}
	}
	for _, id := range []string{"a.b", "*", ">", "with space", "ünï", "=x", "a/b"} {
		tok, err := Token(id)
		if err != nil || !strings.HasPrefix(tok, "=") {
			t.Errorf("Token(%q) = %q, %v: want an encoded token", id, tok, err)
		}
	}
	if _, err := Token(""); !errors.Is(err, ErrBadID) {
		t.Errorf("empty id: %v", err)
	}
	for _, tok := range []string{"", "=", "=!!", "a.b"} {
		if _, err := ParseToken(tok); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseToken(%q): %v", tok, err)
		}
	}
}

// FuzzToken: every id encodes to one safe token that decodes back to it.
func FuzzToken(f *testing.F) {
	for _, s := range []string{"s1", "a.b", "=", "a b", "\x00", "lash.sess.>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		tok, err := Token(id)
		if id == "" || len(id) > MaxIDBytes {
			if err == nil {
				t.Fatalf("id of %d bytes accepted", len(id))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("token %q of %q is not a safe subject token", tok, id)
		}
		for _, c := range tok {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '=') {
				t.Fatalf("token %q holds %q, not valid in a KV key", tok, c)
			}
		}
		back, err := ParseToken(tok)
		if err != nil || back != id {
			t.Fatalf("ParseToken(%q) = %q, %v; want %q", tok, back, err, id)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{{Prefix: "Lash"}, {Prefix: "a.b"}, {Replicas: 7}, {Replicas: -1}, {DuplicateWindow: 10}, {MaxMsgSize: 10}}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestTokenBoundsAndCanonicalForm(t *testing.T) {
	long := strings.Repeat("a", MaxIDBytes)
	if tok, err := Token(long); err != nil || tok != long {
		t.Fatalf("Token of %d bytes: %q, %v", MaxIDBytes, tok, err)
	}
	for _, id := range []string{long + "a", strings.Repeat("é", MaxIDBytes), strings.Repeat("x", 64<<10)} {
		if _, err := Token(id); !errors.Is(err, ErrBadID) {
			t.Errorf("Token of %d bytes: %v, want ErrBadID", len(id), err)
		}
		enc := "=" + base64.RawURLEncoding.EncodeToString([]byte(id))
		if _, err := ParseToken(enc); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseToken of an encoded id of %d bytes: %v, want ErrBadID", len(id), err)
		}
		if _, err := ParseToken(id); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseToken of a plain token of %d bytes: %v, want ErrBadID", len(id), err)
		}
	}
	// One id, one token: the encoded form of a plain id names nothing.
	for _, tok := range []string{"=aGk", "=czE"} {
		_, err := ParseToken(tok)
		if !errors.Is(err, ErrBadID) || !strings.Contains(err.Error(), "canonical") {
			t.Errorf("ParseToken(%q): %v, want a non-canonical refusal", tok, err)
		}
	}
	s := Subjects{prefix: "lash"}
	if _, err := s.SessionOf("lash.sess.=aGk.in"); !errors.Is(err, ErrBadID) {
		t.Errorf("SessionOf a non-canonical subject: %v", err)
	}
	if _, err := s.SessionInputs(long + "x"); !errors.Is(err, ErrBadID) {
		t.Errorf("SessionInputs of a long id: %v", err)
	}
	if err := (Config{Prefix: strings.Repeat("p", 33)}).Validate(); err == nil {
		t.Error("a prefix of 33 characters was accepted")
	}
}

// Only a single server answers reads directly, and only the session
// stream's: a replicated stream's follower could answer from behind.
func TestDirectGetsOnlyOnOneServer(t *testing.T) {
	for _, replicas := range []int{1, 3} {
		c := Config{Replicas: replicas}.withDefaults()
		for s := Stream(0); s < numStreams; s++ {
			want := (s == Sessions || s == Processes) && replicas == 1
			if got := c.streamConfig(s).AllowDirect; got != want {
				t.Errorf("R%d %s: direct gets %v, want %v", replicas, c.streamName(s), got, want)
			}
		}
		if c.leaseStreamConfig().AllowDirect || c.blobStreamConfig().AllowDirect {
			t.Errorf("R%d: the lease bucket or the object store allows direct gets", replicas)
		}
	}
}

// A direct get's answer without its place, or with a status other than
// "no message", is an error; a subject that would need escaping is not
// sent.
func TestDirectAnswer(t *testing.T) {
	status := func(code, desc string) *nats.Msg {
		return &nats.Msg{Header: nats.Header{"Status": {code}, "Description": {desc}}}
	}
	if _, err := directAnswer(status("404", "Message Not Found"), "p.sess.s.in"); !errors.Is(err, ErrNotFound) {
		t.Errorf("404: %v", err)
	}
	if _, err := directAnswer(status("408", "Bad Request"), "p.sess.s.in"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("408: %v", err)
	}
	if _, err := directAnswer(&nats.Msg{Data: []byte("x"), Header: nats.Header{}}, "p.sess.s.in"); !errors.Is(err, errBadAnswer) {
		t.Errorf("no headers: %v", err)
	}
	ok := &nats.Msg{Data: []byte("x"), Header: nats.Header{"Nats-Sequence": {"7"}, "Nats-Subject": {"p.sess.s.in"},
		"Nats-Time-Stamp": {"2026-11-25T01:02:03.000000004Z"}}}
	if m, err := directAnswer(ok, "p.sess.s.in"); err != nil || m.Seq != 7 || m.Subject != "p.sess.s.in" || m.Time.Nanosecond() != 4 {
		t.Errorf("answer %+v, %v", m, err)
	}
	for _, s := range []string{"", `p.sess."x`, `p.sess.\x`, "p.sess.\n", "p.sess.é"} {
		if plainSubject(s) {
			t.Errorf("%q taken as plain", s)
		}
	}
	if !plainSubject("p.sess.=YWI-_.in") || !plainSubject("p.sess.*.in") {
		t.Error("a subject lash makes is refused")
	}
}
