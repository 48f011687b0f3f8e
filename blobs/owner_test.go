package blobs

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// An object's name says its owner: the same bytes of two owners are two
// objects, the deployment's own are named by their sha256 alone, and the
// metadata gives the owner back.
func TestOwnerNames(t *testing.T) {
	sum := sha256.Sum256([]byte("payload"))
	owners := []Owner{
		{Kind: KindRecord, Session: "s1", Turn: "in-1"},
		{Kind: KindRecord, Session: "s1", Turn: "in-2"},
		{Kind: KindRecord, Session: "s2", Turn: "in-1"},
		{Kind: KindBody, Session: "s1"},
		{Kind: KindSnapshot, Session: "s1"},
		// Fields that run together must not name the same object.
		{Kind: KindRecord, Session: "s1\x00in", Turn: "1"},
	}
	seen := map[string]Owner{}
	for _, o := range owners {
		name := o.Name(sum)
		if prev, ok := seen[name]; ok {
			t.Fatalf("%+v and %+v share the name %s", o, prev, name)
		}
		seen[name] = o
		back, ok := OwnerOf(o.Metadata())
		if !ok || back != o {
			t.Fatalf("owner %+v read back as %+v, %v", o, back, ok)
		}
	}
	if got := (Owner{}).Name(sum); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("the deployment's object is named %s", got)
	}
	if _, ok := OwnerOf(nil); ok {
		t.Fatal("an object without metadata read as owned")
	}
}
