package triggers

import (
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"deploy", "deploy", true},
		{"deploy", "deploy.1", false},
		{"deploy.>", "deploy", false},
		{"deploy.>", "deploy.1.done", true},
		{"deploy.*", "deploy.1", true},
		{"deploy.*", "deploy.1.done", false},
		{"*.1.done", "deploy.1.done", true},
		{"*.1.done", "deploy.2.done", false},
		{"*", "mail", true},
		{">", "mail.x", true},
	} {
		if got := Match(c.pattern, c.subject); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}

// Every action on every state either refuses or moves the revision by
// one exactly when it changes something.
func TestApplyRevisions(t *testing.T) {
	now := time.Unix(0, 0)
	spec := &Spec{SourceType: "deploy", SourceKey: ">", Start: Target{Kind: "tool_call", Tool: "t"}}
	cur, changed, err := apply(nil, Op{ID: "1", Action: ActRegister, Owner: Owner{Kind: Host}, Key: "k", Spec: spec}, nil, "n", now)
	if err != nil || !changed || cur.Revision != 1 {
		t.Fatalf("register: %+v %v %v", cur, changed, err)
	}
	for _, a := range []string{ActEnable, ActDisable, ActDisable, ActDelete, ActDelete, ActEnable, ActRevive, ActRevive, ActEnable} {
		next, changed, err := apply(cur, Op{ID: "x", Action: a, Subscription: cur.ID}, nil, "n", now)
		if err != nil {
			if a != ActEnable || !cur.Deleted {
				t.Fatalf("%s on %+v: %v", a, cur, err)
			}
			continue
		}
		if want := cur.Revision + map[bool]uint64{true: 1}[changed]; next.Revision != want {
			t.Fatalf("%s: revision %d, want %d", a, next.Revision, want)
		}
		cur = next
	}
	if cur.Incarnation != 2 || !cur.Live() {
		t.Fatalf("after delete and revive: %+v", cur)
	}
}
