package codemode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// maxDepth bounds the nesting of a value crossing the program's edge, in
// either direction; maxDigits a number's digits (a number of a million
// digits costs seconds to read).
const (
	maxDepth  = 64
	maxDigits = 1000
)

// fromJSON turns a JSON document into a Starlark value: objects become
// dicts in the document's key order, so the same bytes always make the
// same value.
func fromJSON(data []byte) (starlark.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (starlark.Value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return starlark.None, nil
	case bool:
		return starlark.Bool(t), nil
	case string:
		return starlark.String(t), nil
	case json.Number:
		if len(t) > maxDigits {
			return nil, fmt.Errorf("a number of %d digits, at most %d", len(t), maxDigits)
		}
		if i, ok := new(big.Int).SetString(string(t), 10); ok {
			return starlark.MakeBigInt(i), nil
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return nil, err
		}
		return starlark.Float(f), nil
	case json.Delim:
		switch t {
		case '[':
			var elems []starlark.Value
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				elems = append(elems, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return starlark.NewList(elems), nil
		case '{':
			d := starlark.NewDict(0)
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if err := d.SetKey(starlark.String(k.(string)), v); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return d, nil
		}
	}
	return nil, fmt.Errorf("unexpected %v", tok)
}

// toJSON encodes a Starlark value as JSON: dicts (with string keys) in
// their insertion order, lists and tuples as arrays, structs as objects
// in their fields' order. Anything else (functions, sets) is refused, and
// so is an encoding past limit bytes, as soon as it passes it: a list
// that holds one list twice, nested, is cheap to build and costly to
// spell out.
func toJSON(v starlark.Value, limit int) ([]byte, error) {
	e := encoder{limit: limit}
	if err := e.value(v, 0); err != nil {
		return nil, err
	}
	return e.b.Bytes(), nil
}

// errTooLarge is an encoding past its limit.
type errTooLarge struct{ limit int }

func (e errTooLarge) Error() string { return fmt.Sprintf("more than %d bytes as JSON", e.limit) }

type encoder struct {
	b     bytes.Buffer
	limit int
}

func (e *encoder) value(v starlark.Value, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	if e.b.Len() > e.limit {
		return errTooLarge{e.limit}
	}
	b := &e.b
	switch x := v.(type) {
	case starlark.NoneType:
		b.WriteString("null")
	case starlark.Bool:
		b.WriteString(strconv.FormatBool(bool(x)))
	case starlark.Int:
		b.WriteString(x.String())
	case starlark.Float:
		f := float64(x)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("%v has no JSON form", x)
		}
		// A float stays one across the edge: 1.0, not 1, which comes
		// back an int.
		out := strconv.AppendFloat(nil, f, 'g', -1, 64)
		if !bytes.ContainsAny(out, ".e") {
			out = append(out, ".0"...)
		}
		b.Write(out)
	case starlark.String:
		out, _ := json.Marshal(string(x))
		b.Write(out)
	case *starlark.List:
		return e.seq(x, depth)
	case starlark.Tuple:
		return e.seq(x, depth)
	case *starlark.Dict:
		b.WriteByte('{')
		for i, item := range x.Items() {
			k, ok := item[0].(starlark.String)
			if !ok {
				return fmt.Errorf("a dict key %s is not a string", item[0].Type())
			}
			if i > 0 {
				b.WriteByte(',')
			}
			out, _ := json.Marshal(string(k))
			b.Write(out)
			b.WriteByte(':')
			if err := e.value(item[1], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case *starlarkstruct.Struct:
		b.WriteByte('{')
		for i, name := range x.AttrNames() {
			if i > 0 {
				b.WriteByte(',')
			}
			out, _ := json.Marshal(name)
			b.Write(out)
			b.WriteByte(':')
			f, _ := x.Attr(name)
			if err := e.value(f, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("a %s has no JSON form", v.Type())
	}
	if e.b.Len() > e.limit {
		return errTooLarge{e.limit}
	}
	return nil
}

func (e *encoder) seq(seq starlark.Indexable, depth int) error {
	e.b.WriteByte('[')
	for i := range seq.Len() {
		if i > 0 {
			e.b.WriteByte(',')
		}
		if err := e.value(seq.Index(i), depth+1); err != nil {
			return err
		}
	}
	e.b.WriteByte(']')
	return nil
}

// jsonModule is the program's json: encode and decode, bounded as values
// crossing its edge are (go.starlark.net's own decode has no depth
// bound, and a deep enough document overflows the Go stack).
func jsonModule(limit int) *starlarkstruct.Module {
	return &starlarkstruct.Module{Name: "json", Members: starlark.StringDict{
		"encode": starlark.NewBuiltin("json.encode", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			var v starlark.Value
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &v); err != nil {
				return nil, err
			}
			out, err := toJSON(v, limit)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", b.Name(), err)
			}
			return starlark.String(out), nil
		}),
		"decode": starlark.NewBuiltin("json.decode", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			var s string
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &s); err != nil {
				return nil, err
			}
			if len(s) > limit {
				return nil, fmt.Errorf("%s: %d bytes, at most %d", b.Name(), len(s), limit)
			}
			v, err := fromJSON([]byte(s))
			if err != nil {
				return nil, fmt.Errorf("%s: %v", b.Name(), err)
			}
			return v, nil
		}),
	}}
}
