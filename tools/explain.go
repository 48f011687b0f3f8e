package tools

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// explain finds the first reason, in a fixed order, why v does not match s,
// and says it in terms of the arguments rather than the schema: the field's
// path and what is wrong. It knows the keywords jsonschema.For produces
// (type, properties, required, additionalProperties, items, minimum,
// maximum, minItems, maxItems) and returns "" when the problem lies
// elsewhere; the caller then falls back to the validator's own message.
//
// jsonschema-go reports only one error, found while ranging over maps, so
// with several problems its message varies from run to run; this one does
// not.
func explain(s *jsonschema.Schema, v any, path string) string {
	if s == nil {
		return ""
	}
	if want := schemaTypes(s); len(want) > 0 {
		got := typeOf(v)
		if !typeMatches(got, want) {
			return fmt.Sprintf("%s: got %s, want %s", where(path), got, strings.Join(want, " or "))
		}
	}
	switch x := v.(type) {
	case map[string]any:
		return explainObject(s, x, path)
	case []any:
		if s.MinItems != nil && len(x) < *s.MinItems {
			return fmt.Sprintf("%s: has %d items, want at least %d", where(path), len(x), *s.MinItems)
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			return fmt.Sprintf("%s: has %d items, want at most %d", where(path), len(x), *s.MaxItems)
		}
		for i, item := range x {
			if msg := explain(s.Items, item, path+"["+strconv.Itoa(i)+"]"); msg != "" {
				return msg
			}
		}
	case float64:
		if s.Minimum != nil && x < *s.Minimum {
			return fmt.Sprintf("%s: %v is less than the minimum %v", where(path), x, *s.Minimum)
		}
		if s.Maximum != nil && x > *s.Maximum {
			return fmt.Sprintf("%s: %v is greater than the maximum %v", where(path), x, *s.Maximum)
		}
	}
	return ""
}

func explainObject(s *jsonschema.Schema, obj map[string]any, path string) string {
	if isFalse(s.AdditionalProperties) {
		var unknown []string
		for k := range obj {
			if _, ok := s.Properties[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			msg := "unknown field " + quoteAll(joinPaths(path, unknown))
			if len(unknown) > 1 {
				msg = "unknown fields " + quoteAll(joinPaths(path, unknown))
			}
			if known := propertyNames(s); len(known) > 0 {
				msg += " (known fields" + in(path) + ": " + quoteAll(known) + ")"
			} else {
				msg += " (" + where(path) + " takes no fields)"
			}
			return msg
		}
	}
	var missing []string
	for _, name := range s.Required {
		if _, ok := obj[name]; !ok {
			missing = append(missing, name)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		return "missing required field " + quoteAll(joinPaths(path, missing))
	default:
		return "missing required fields " + quoteAll(joinPaths(path, missing))
	}
	for _, name := range propertyNames(s) {
		if val, ok := obj[name]; ok {
			if msg := explain(s.Properties[name], val, joinPath(path, name)); msg != "" {
				return msg
			}
		}
	}
	if s.AdditionalProperties != nil && !isFalse(s.AdditionalProperties) {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			if _, ok := s.Properties[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if msg := explain(s.AdditionalProperties, obj[k], joinPath(path, k)); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// propertyNames lists s's properties in PropertyOrder, then the rest sorted.
func propertyNames(s *jsonschema.Schema) []string {
	names := make([]string, 0, len(s.Properties))
	for _, n := range s.PropertyOrder {
		if _, ok := s.Properties[n]; ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var rest []string
	for n := range s.Properties {
		if !slices.Contains(names, n) {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

// isFalse reports whether s is the schema that matches nothing, as
// jsonschema.For writes "additionalProperties": false.
func isFalse(s *jsonschema.Schema) bool {
	if s == nil || s.Not == nil {
		return false
	}
	not := *s.Not
	cp := *s
	cp.Not = nil
	return isEmpty(&not) && isEmpty(&cp)
}

func isEmpty(s *jsonschema.Schema) bool {
	b, err := s.MarshalJSON()
	return err == nil && string(b) == "true"
}

func schemaTypes(s *jsonschema.Schema) []string {
	if s.Type != "" {
		return []string{s.Type}
	}
	return s.Types
}

// typeOf names the JSON type of a value decoded by encoding/json into any.
func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if _, frac := math.Modf(x); frac == 0 {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func typeMatches(got string, want []string) bool {
	return slices.Contains(want, got) || got == "integer" && slices.Contains(want, "number")
}

func where(path string) string {
	if path == "" {
		return "arguments"
	}
	return "field " + strconv.Quote(path)
}

func in(path string) string {
	if path == "" {
		return ""
	}
	return " of " + strconv.Quote(path)
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func joinPaths(path string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = joinPath(path, n)
	}
	return out
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
