package lash

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/codemode"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools"
)

// Saved programs (ADR 0042): a program kept under a name, for the program
// tool to run by name (a background process). Each version is one object
// of the object store, owned by the name and named by its content's
// sha256, so saving the same program again makes no new version; the
// versions are numbered in the order they were first saved. They are an
// operator's, kept until the program is deleted.

// MaxRequires bounds the tools a saved program names as required.
const MaxRequires = 64

// SavedProgram is one version of a saved program.
type SavedProgram struct {
	Name     string    `json:"name"`
	Version  int       `json:"version"`
	Sum      string    `json:"sum"`
	Program  string    `json:"program,omitempty"`
	Requires []string  `json:"requires,omitempty"`
	Saved    time.Time `json:"saved"`
	Bytes    int64     `json:"bytes"`
}

// savedBody is a version's object.
type savedBody struct {
	V        int      `json:"v"`
	Program  string   `json:"program"`
	Requires []string `json:"requires,omitempty"`
}

func programOwner(name string) blobs.Owner {
	return blobs.Owner{Kind: blobs.KindProgram, Session: name}
}

// metaProgramSig is the metadata key of a version's signature.
const metaProgramSig = "lash-sig"

func programVouch(name string) string { return "program\x00" + name }

// SaveProgram saves program under name as its next version, unless it is
// one of its versions already, and returns that version. The name follows
// an agent's rules; the program must parse; requires names tools.
func SaveProgram(ctx context.Context, c *streams.Client, name, program string, requires []string) (*SavedProgram, error) {
	if err := agents.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: program name: %v", ErrBadInput, err)
	}
	if err := codemode.Check(program); err != nil {
		return nil, fmt.Errorf("%w: program %s: %v", ErrBadInput, name, err)
	}
	if len(requires) > MaxRequires {
		return nil, fmt.Errorf("%w: program %s requires %d tools, at most %d", ErrBadInput, name, len(requires), MaxRequires)
	}
	for _, t := range requires {
		if err := tools.CheckName(t); err != nil {
			return nil, fmt.Errorf("%w: program %s requires %q: %v", ErrBadInput, name, t, err)
		}
		if t == BackgroundProgramTool || t == "run_program" {
			return nil, fmt.Errorf("%w: program %s requires %q: a program cannot start a program", ErrBadInput, name, t)
		}
	}
	data, err := json.Marshal(savedBody{V: 1, Program: program, Requires: requires})
	if err != nil {
		return nil, err
	}
	// Signed where the deployment signs: a version no operator saved is
	// never listed, so never run.
	owner, sum := programOwner(name), sha256.Sum256(data)
	sig, err := c.VouchObject(programVouch(name), sum)
	if err != nil {
		return nil, err
	}
	meta := owner.Metadata()
	if sig != "" {
		meta[metaProgramSig] = sig
	}
	if err := c.PutObject(ctx, owner.Name(sum), sum, meta, data); err != nil {
		return nil, err
	}
	versions, err := SavedProgramVersions(ctx, c, name)
	if err != nil {
		return nil, err
	}
	for _, v := range versions {
		if v.Sum == hex.EncodeToString(sum[:]) {
			v.Program, v.Requires = program, requires
			return &v, nil
		}
	}
	return nil, fmt.Errorf("lash: program %s: the version just saved is not listed", name)
}

// SavedPrograms lists the latest version of every saved program, by name,
// without their text.
func SavedPrograms(ctx context.Context, c *streams.Client) ([]SavedProgram, error) {
	all, err := savedVersions(ctx, c, "")
	if err != nil {
		return nil, err
	}
	var out []SavedProgram
	for i, v := range all {
		if i+1 == len(all) || all[i+1].Name != v.Name {
			out = append(out, v)
		}
	}
	return out, nil
}

// SavedProgramVersions lists a saved program's versions, oldest first,
// without their text; none if it has none.
func SavedProgramVersions(ctx context.Context, c *streams.Client, name string) ([]SavedProgram, error) {
	if err := agents.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: program name: %v", ErrBadInput, err)
	}
	return savedVersions(ctx, c, name)
}

// savedVersions lists the versions of name's program, or of every
// program when name is "", by name, then oldest first.
func savedVersions(ctx context.Context, c *streams.Client, name string) ([]SavedProgram, error) {
	var out []SavedProgram
	err := c.Objects(ctx, func(o streams.ObjectInfo) error {
		owner, ok := blobs.OwnerOf(o.Metadata)
		if !ok || owner.Kind != blobs.KindProgram || name != "" && owner.Session != name || o.Sum == ([32]byte{}) ||
			o.Name != owner.Name(o.Sum) || !c.ObjectVouched(programVouch(owner.Session), o.Sum, o.Metadata[metaProgramSig]) {
			return nil // not a version an operator saved under that name
		}
		out = append(out, SavedProgram{Name: owner.Session, Sum: hex.EncodeToString(o.Sum[:]), Saved: o.Modified.UTC(), Bytes: o.Size})
		return nil
	})
	slices.SortFunc(out, func(a, b SavedProgram) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), a.Saved.Compare(b.Saved), strings.Compare(a.Sum, b.Sum))
	})
	for i := range out {
		out[i].Version = 1
		if i > 0 && out[i-1].Name == out[i].Name {
			out[i].Version = out[i-1].Version + 1
		}
	}
	return out, err
}

// ErrNoProgram: no saved program (or version) by that name.
var ErrNoProgram = errors.New("lash: no such saved program")

// LoadProgram reads a saved program by ref: "name" (its latest version),
// "name@N" (version N) or "name@HEX" (the version whose sum starts with
// HEX, 8 digits at least).
func LoadProgram(ctx context.Context, c *streams.Client, ref string) (*SavedProgram, error) {
	name, at, _ := strings.Cut(ref, "@")
	versions, err := SavedProgramVersions(ctx, c, name)
	if err != nil {
		return nil, err
	}
	var v *SavedProgram
	switch n, err := strconv.Atoi(at); {
	case len(versions) == 0:
	case at == "":
		v = &versions[len(versions)-1]
	case err == nil && len(at) < 8: // 8 digits or more are a sum's
		if n >= 1 && n <= len(versions) {
			v = &versions[n-1]
		}
	case len(at) >= 8:
		for i := range versions {
			if strings.HasPrefix(versions[i].Sum, strings.ToLower(at)) {
				v = &versions[i]
				break
			}
		}
	}
	if v == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoProgram, ref)
	}
	return v, loadBody(ctx, c, v)
}

// loadBody reads a version's text and requirements.
func loadBody(ctx context.Context, c *streams.Client, v *SavedProgram) error {
	var sum [32]byte
	if b, err := hex.DecodeString(v.Sum); err != nil || len(b) != len(sum) {
		return fmt.Errorf("%w: program %s: sum %q", ErrBadInput, v.Name, v.Sum)
	} else {
		copy(sum[:], b)
	}
	data, err := newBlobStore(c).Get(ctx, programOwner(v.Name), blobs.Ref{Sum: sum, Size: v.Bytes})
	if err != nil {
		return err
	}
	var body savedBody
	if err := json.Unmarshal(data, &body); err != nil || body.V != 1 {
		return fmt.Errorf("lash: program %s version %d is unreadable", v.Name, v.Version)
	}
	v.Program, v.Requires = body.Program, body.Requires
	return nil
}

// DeleteProgram deletes every version of a saved program and says how
// many there were.
func DeleteProgram(ctx context.Context, c *streams.Client, name string) (int, error) {
	if _, err := c.VouchObject("", [32]byte{}); err != nil {
		return 0, err // an operator's alone
	}
	versions, err := SavedProgramVersions(ctx, c, name)
	if err != nil {
		return 0, err
	}
	for _, v := range versions {
		var sum [32]byte
		b, _ := hex.DecodeString(v.Sum)
		copy(sum[:], b)
		if _, err := c.DeleteObject(ctx, programOwner(name).Name(sum)); err != nil {
			return 0, err
		}
	}
	return len(versions), nil
}
