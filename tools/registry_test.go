package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

func TestRegistryDeterministicSpecs(t *testing.T) {
	names := []string{"zeta", "alpha", "order", "Beta", "m-1", "m_2"}
	build := func(order []string) *tools.Registry {
		reg := tools.New()
		for _, n := range order {
			var tool tools.Tool
			if n == "order" {
				tool = orderTool(t, nil)
			} else {
				tool = mustFunc(t, n, func(ctx context.Context, a Address) (string, error) { return "", nil })
			}
			if err := reg.Register(tool); err != nil {
				t.Fatal(err)
			}
		}
		return reg
	}
	reversed := make([]string, len(names))
	for i, n := range names {
		reversed[len(names)-1-i] = n
	}
	a, b := build(names), build(reversed)
	specs := a.Specs()
	var got []string
	for _, s := range specs {
		got = append(got, s.Name)
	}
	if want := []string{"Beta", "alpha", "m-1", "m_2", "order", "zeta"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Specs order %q, want %q", got, want)
	}
	for range 10 {
		if again := a.Specs(); !reflect.DeepEqual(again, specs) {
			t.Fatalf("Specs changed between calls")
		}
	}
	if !reflect.DeepEqual(b.Specs(), specs) {
		t.Errorf("registration order changed the specs:\n%+v\n%+v", b.Specs(), specs)
	}
	// Callers own the slice.
	specs[0].Name = "changed"
	if a.Specs()[0].Name != "Beta" {
		t.Error("Specs shares its slice with callers")
	}
}

// fickle returns a different spec each time it is asked.
type fickle struct{ n *int }

func (f fickle) Spec() turn.ToolSpec {
	*f.n++
	return turn.ToolSpec{Name: "fickle", Description: strings.Repeat("!", *f.n)}
}

func (fickle) Call(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{}, nil
}

func TestRegistryRecordsSpecOnce(t *testing.T) {
	reg := tools.New()
	if err := reg.Register(fickle{n: new(int)}); err != nil {
		t.Fatal(err)
	}
	first := reg.Specs()
	if second := reg.Specs(); !reflect.DeepEqual(first, second) || first[0].Description != "!" {
		t.Errorf("specs %+v then %+v", first, second)
	}
}

func TestRegistryRefuses(t *testing.T) {
	reg := tools.New()
	if err := reg.Register(orderTool(t, nil)); err != nil {
		t.Fatal(err)
	}
	err := reg.Register(orderTool(t, nil))
	if !errors.Is(err, tools.ErrDuplicate) || !strings.Contains(err.Error(), `"order"`) {
		t.Errorf("duplicate: err = %v", err)
	}
	for _, name := range []string{"", "has space", "dotted.name", "ünïcode", strings.Repeat("x", 65)} {
		err := reg.Register(rawTool{name: name})
		if !errors.Is(err, tools.ErrInvalidName) {
			t.Errorf("name %q: err = %v, want ErrInvalidName", name, err)
		}
	}
	if err := reg.Register(rawTool{name: strings.Repeat("x", 64)}); err != nil {
		t.Errorf("64-character name: %v", err)
	}
	if err := reg.Register(nil); !errors.Is(err, tools.ErrInvalidSpec) {
		t.Errorf("nil tool: err = %v", err)
	}
	if err := reg.Register(schemaTool(`[1]`)); !errors.Is(err, tools.ErrInvalidSpec) {
		t.Errorf("array schema: err = %v", err)
	}
	if err := reg.Register(schemaTool(`{"type":`)); !errors.Is(err, tools.ErrInvalidSpec) {
		t.Errorf("malformed schema: err = %v", err)
	}
	if reg.Len() != 2 {
		t.Errorf("Len = %d after refusals, want 2", reg.Len())
	}
}

type schemaTool string

func (s schemaTool) Spec() turn.ToolSpec { return turn.ToolSpec{Name: "s", Schema: string(s)} }
func (schemaTool) Call(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{}, nil
}

func TestRegistryGetRemove(t *testing.T) {
	reg := tools.New()
	tool := orderTool(t, nil)
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	if got, ok := reg.Get("order"); !ok || got != tool {
		t.Errorf("Get = %v, %v", got, ok)
	}
	if _, ok := reg.Get("nope"); ok {
		t.Error("Get found an unregistered tool")
	}
	if !reg.Remove("order") || reg.Remove("order") {
		t.Error("Remove should report true once, then false")
	}
	if _, ok := reg.Get("order"); ok || len(reg.Specs()) != 0 {
		t.Error("removed tool still present")
	}
	if err := reg.Register(tool); err != nil {
		t.Errorf("re-register after Remove: %v", err)
	}
}
