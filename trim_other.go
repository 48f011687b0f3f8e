//go:build !cgo || !linux

package lash

// trimCHeap has nothing to do: without cgo Pebble allocates from the Go
// heap, which debug.FreeOSMemory returns.
func trimCHeap() {}
