package streams

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"testing"
)

// A stamp made before the AGENTS stream existed still verifies: its MAC
// covers the six streams of that time, and a stream it does not list is
// one all of whose records were written since, so signed. A stamp that
// lists AGENTS covers it.
func TestStampsOfEarlierDeployments(t *testing.T) {
	k := &signKey{key: bytes.Repeat([]byte{3}, 32)}
	since := map[string]uint64{"SESSIONS": 10, "EFFECTS": 20, "PROCESSES": 30, "TRIGGERS": 40, "TIMERS": 50}
	h := hmac.New(sha256.New, k.key)
	h.Write([]byte("stamp"))
	for _, name := range []string{"SESSIONS", "EFFECTS", "PROCESSES", "TRIGGERS", "TIMERS", "LIVE"} {
		fmt.Fprintf(h, "\x00%s=%d", name, since[name])
	}
	if earlier := base64.RawURLEncoding.EncodeToString(h.Sum(nil)); k.stampMAC(since) != earlier {
		t.Fatal("a stamp without AGENTS no longer verifies")
	}
	with := map[string]uint64{"AGENTS": 0}
	for n, s := range since {
		with[n] = s
	}
	if k.stampMAC(with) == k.stampMAC(since) {
		t.Fatal("a stamp's MAC does not cover AGENTS when it lists it")
	}
	with["AGENTS"] = 5
	if k.stampMAC(with) == k.stampMAC(map[string]uint64{"AGENTS": 0, "SESSIONS": 10, "EFFECTS": 20, "PROCESSES": 30, "TRIGGERS": 40, "TIMERS": 50}) {
		t.Fatal("a stamp's MAC does not cover AGENTS' sequence")
	}
}
