// Package pack appends MessagePack values to a byte slice, each exactly as
// msgpack/v5 encodes the Go value of the same type with its default
// options, so that a hot record can be written without reflection and
// still be read (and compared byte for byte) by msgpack.Unmarshal. A
// struct is a map of its fields by tag in declaration order, without
// those its omitempty tag leaves out; the callers write that by hand and
// test it against msgpack.Marshal.
package pack

import (
	"encoding/binary"
	"math"
)

// Map appends the header of a map of n pairs.
func Map(b []byte, n int) []byte { return header(b, n, 0x80, 0xde, 0xdf) }

// Array appends the header of an array of n values.
func Array(b []byte, n int) []byte { return header(b, n, 0x90, 0xdc, 0xdd) }

// header appends a map's or an array's header: its count in the fix
// byte below 16, else after the 16- or 32-bit code.
func header(b []byte, n int, fix, c16, c32 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, c16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, c32), uint32(n))
}

// Str appends a string.
func Str(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// Bin appends a byte slice; nil is msgpack's nil, as for a nil []byte.
func Bin(b, v []byte) []byte {
	if v == nil {
		return Nil(b)
	}
	switch n := len(v); {
	case n < 256:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

// Nil appends nil.
func Nil(b []byte) []byte { return append(b, 0xc0) }

// Bool appends a bool.
func Bool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

// Uint8 appends a uint8 field's value: two bytes, its type kept.
func Uint8(b []byte, v uint8) []byte { return append(b, 0xcc, v) }

// Uint64 appends a uint64 field's value: nine bytes, its type kept.
func Uint64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(append(b, 0xcf), v) }

// Int64 appends an int64 field's value (a time.Duration too): nine
// bytes, its type kept.
func Int64(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

// Float64 appends a float64: nine bytes.
func Float64(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(v))
}

// Int appends an int field's value in the fewest bytes.
func Int(b []byte, v int) []byte {
	n := int64(v)
	switch {
	case n >= 0:
		return uintCompact(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

func uintCompact(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

// Count is how many of set are true: the fields a map of a struct holds
// when the others are left out as empty.
func Count(set ...bool) int {
	n := 0
	for _, s := range set {
		if s {
			n++
		}
	}
	return n
}
