package leases

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestKeyAndTTL(t *testing.T) {
	if k, err := Key("sess", "a.b"); err != nil || k != "sess.=YS5i" {
		t.Fatalf("Key = %q, %v", k, err)
	}
	if _, err := Key("sess", ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty id: %v", err)
	}
	for _, ttl := range []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond} {
		if err := checkTTL(ttl); !errors.Is(err, ErrInvalid) {
			t.Errorf("TTL %s accepted", ttl)
		}
	}
}

func TestValueToken(t *testing.T) {
	if got := (value{}).token(9); got != 9 {
		t.Errorf("a claim's token is its revision: got %d", got)
	}
	if got := (value{Token: 4}).token(9); got != 4 {
		t.Errorf("a renewal carries the claim's token: got %d", got)
	}
}

func TestProcessGone(t *testing.T) {
	if processGone(os.Getpid()) {
		t.Fatal("this process is reported gone")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run a child process:", err)
	}
	if !processGone(cmd.Process.Pid) {
		t.Fatalf("exited child %d is reported alive", cmd.Process.Pid)
	}
}

func TestLocalOwner(t *testing.T) {
	a, b := LocalOwner("n1"), LocalOwner("n1")
	if a.ID != "n1" || a.PID != os.Getpid() || a.Incarnation == b.Incarnation || a.same(b) || !a.same(a) {
		t.Fatalf("LocalOwner: %+v %+v", a, b)
	}
}
