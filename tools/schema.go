package tools

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// inferSchema derives the arguments schema of A with jsonschema-go, makes
// pointer fields optional, and renders it.
//
// jsonschema-go makes a field optional only when it is tagged omitempty or
// omitzero; a pointer field is merely nullable. But a pointer field the
// model leaves out decodes to nil, which is what optional means to a Go
// function, so pointer fields are taken out of "required" too.
//
// The text is what encoding/json makes of the schema: keywords in
// jsonschema-go's order, properties in field order. It depends only on A
// (and on the JSONSCHEMAGODEBUG environment variable, which jsonschema-go
// reads; keep it the same on every worker).
func inferSchema[A any](opts *jsonschema.ForOptions) (*jsonschema.Schema, string, error) {
	s, err := jsonschema.For[A](opts)
	if err != nil {
		return nil, "", err
	}
	relaxPointers(reflect.TypeFor[A](), s, map[reflect.Type]bool{})
	text, err := json.Marshal(s)
	if err != nil {
		return nil, "", err
	}
	return s, string(text), nil
}

// relaxPointers walks the Go type t beside its inferred schema s and drops
// pointer fields from "required". Where the two do not line up (a type
// replaced through ForOptions.TypeSchemas, say) it leaves s alone.
func relaxPointers(t reflect.Type, s *jsonschema.Schema, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s == nil || seen[t] {
		return
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		relaxPointers(t.Elem(), s.Items, seen)
	case reflect.Map:
		relaxPointers(t.Elem(), s.AdditionalProperties, seen)
	case reflect.Struct:
		if s.Properties == nil {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for _, f := range reflect.VisibleFields(t) {
			name, ok := jsonName(f)
			if !ok {
				continue
			}
			ps := s.Properties[name]
			if ps == nil {
				continue
			}
			if f.Type.Kind() == reflect.Pointer {
				s.Required = slices.DeleteFunc(s.Required, func(r string) bool { return r == name })
			}
			relaxPointers(f.Type, ps, seen)
		}
		if len(s.Required) == 0 {
			s.Required = nil
		}
	}
}

// jsonName is the property name jsonschema-go gives a struct field, and
// false for a field it leaves out (unexported, tagged "-", or embedded: its
// fields are promoted).
func jsonName(f reflect.StructField) (string, bool) {
	if f.Anonymous || !f.IsExported() {
		return "", false
	}
	tag, ok := f.Tag.Lookup("json")
	if !ok {
		return f.Name, true
	}
	name, _, found := strings.Cut(tag, ",")
	if name == "-" && !found {
		return "", false
	}
	if name == "" {
		return f.Name, true
	}
	return name, true
}
