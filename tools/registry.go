package tools

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lash-run/lash/turn"
)

var (
	// ErrInvalidName refuses a tool whose name providers would not accept.
	ErrInvalidName = errors.New("tools: invalid tool name")
	// ErrDuplicate refuses a second tool with a name already registered.
	ErrDuplicate = errors.New("tools: duplicate tool")
	// ErrInvalidSpec refuses a tool whose spec cannot be offered to a model.
	ErrInvalidSpec = errors.New("tools: invalid tool spec")
)

// maxNameLen is the longest tool name the major providers accept.
const maxNameLen = 64

// Registry is a set of tools by name. It is safe for concurrent use.
//
// Register reads a tool's Spec once and keeps it: Specs returns those
// recorded specs, sorted by name, so the same set of tools always yields
// byte-identical specs however the tools behave later.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]entry
	// settling: until then the registry may lack tools that exist.
	settling time.Time
	// changed is closed and replaced at every change.
	changed chan struct{}
}

type entry struct {
	tool Tool
	spec turn.ToolSpec
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{tools: make(map[string]entry), changed: make(chan struct{})}
}

// Settling says that until t the registry may lack tools that exist:
// those served elsewhere that discovery has not found yet, after a start
// or a reconnect. Until then a call to a tool it does not hold waits for
// the tool, within the call's deadline, instead of failing as unknown: a
// restart must not turn "not found yet" into a recorded failure. A zero t
// says the registry has settled.
func (r *Registry) Settling(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settling = t
	r.notify()
}

// notify wakes those waiting for a change; r.mu is held.
func (r *Registry) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Await returns the tool registered under name, waiting for it while the
// registry is settling (see Settling). It returns false once the registry
// settled without it, or when ctx ends first.
func (r *Registry) Await(ctx context.Context, name string) (Tool, bool) {
	for {
		r.mu.RLock()
		e, ok := r.tools[name]
		until, changed := r.settling, r.changed
		r.mu.RUnlock()
		if ok {
			return e.tool, true
		}
		wait := time.Until(until)
		if wait <= 0 {
			return nil, false
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, false
		}
		t.Stop()
	}
}

// Register adds t under its Spec().Name. It refuses a nil tool, a name that is
// not 1 to 64 characters of [A-Za-z0-9_-] (ErrInvalidName), a name already
// registered (ErrDuplicate), and a schema that is not a JSON object
// (ErrInvalidSpec).
func (r *Registry) Register(t Tool) error { return r.put(t, false) }

// Replace registers t, in place of the tool with its name if there is one,
// in one step: a call never finds the name missing meanwhile.
func (r *Registry) Replace(t Tool) error { return r.put(t, true) }

func (r *Registry) put(t Tool, replace bool) error {
	if t == nil {
		return fmt.Errorf("%w: nil tool", ErrInvalidSpec)
	}
	spec := t.Spec()
	if err := CheckName(spec.Name); err != nil {
		return err
	}
	if spec.Schema != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(spec.Schema), &obj); err != nil {
			return fmt.Errorf("%w: tool %q: schema is not a JSON object: %v", ErrInvalidSpec, spec.Name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[spec.Name]; ok && !replace {
		return fmt.Errorf("%w: %q is already registered", ErrDuplicate, spec.Name)
	}
	r.tools[spec.Name] = entry{tool: t, spec: spec}
	r.notify()
	return nil
}

// Get returns the tool registered under name.
func (r *Registry) Get(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	return e.tool, ok
}

// Remove deletes the tool registered under name and reports whether there
// was one.
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.tools[name]
	delete(r.tools, name)
	if ok {
		r.notify()
	}
	return ok
}

// Specs returns the specs recorded at registration, sorted by name. The
// result is a fresh slice; the catalog is hashed into model requests, so the
// same registry always returns the same bytes.
func (r *Registry) Specs() []turn.ToolSpec {
	r.mu.RLock()
	specs := make([]turn.ToolSpec, 0, len(r.tools))
	for _, e := range r.tools {
		specs = append(specs, e.spec)
	}
	r.mu.RUnlock()
	slices.SortFunc(specs, func(a, b turn.ToolSpec) int { return cmp.Compare(a.Name, b.Name) })
	return specs
}

// Len is the number of registered tools.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.tools)
}

// CheckName accepts what OpenAI, Anthropic and Gemini all accept:
// 1 to 64 characters of letters, digits, '_' and '-'.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidName)
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("%w: %q is longer than %d characters", ErrInvalidName, name, maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q has %q at byte %d; use letters, digits, '_' or '-'", ErrInvalidName, name, c, i)
		}
	}
	return nil
}
