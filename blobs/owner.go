package blobs

import (
	"crypto/sha256"
	"encoding/hex"
)

// Kinds of objects, by what refers to them.
const (
	// KindRecord: a journal record's payload (a model answer, a tool
	// result), owned by its session's turn.
	KindRecord = "record"
	// KindBody: a commit's or consume's body, owned by its session.
	KindBody = "body"
	// KindSnapshot: a snapshot's state, owned by its session.
	KindSnapshot = "snapshot"
	// KindProgram: a version of a saved program, owned by its name (in
	// Owner.Session); kept until the program is deleted.
	KindProgram = "program"
)

// Metadata keys of an object: what owns it, for deletion and sweeps.
const (
	MetaKind    = "lash-kind"
	MetaSession = "lash-session"
	MetaTurn    = "lash-turn"
)

// Owner is what an object belongs to. It is part of the object's name, so
// no two owners share an object, and deleting an owner (a session, a turn's
// journal) may delete the objects its records name without looking for
// other readers. The zero Owner is the deployment's: such objects (the
// turn settings) are named by their sha256 alone and shared.
type Owner struct {
	Kind    string
	Session string
	Turn    string
}

// Name is the object name of the payload with sha256 sum owned by o.
func (o Owner) Name(sum [32]byte) string {
	if o == (Owner{}) {
		return hex.EncodeToString(sum[:])
	}
	h := sha256.New()
	h.Write([]byte("lash-object\x00" + o.Kind + "\x00" + o.Session + "\x00" + o.Turn + "\x00"))
	h.Write(sum[:])
	return hex.EncodeToString(h.Sum(nil))
}

// Metadata is what the object's metadata says of o.
func (o Owner) Metadata() map[string]string {
	if o == (Owner{}) {
		return nil
	}
	m := map[string]string{MetaKind: o.Kind, MetaSession: o.Session}
	if o.Turn != "" {
		m[MetaTurn] = o.Turn
	}
	return m
}

// OwnerOf reads an object's owner back from its metadata; ok is false for
// an object written before objects had owners (named by sha256 alone).
func OwnerOf(meta map[string]string) (o Owner, ok bool) {
	o = Owner{Kind: meta[MetaKind], Session: meta[MetaSession], Turn: meta[MetaTurn]}
	return o, o.Kind != "" && o.Session != ""
}
