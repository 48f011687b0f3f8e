//go:build cgo && linux

package lash

// #include <malloc.h>
import "C"

// trimCHeap hands the C heap's free pages back to the system. With cgo,
// Pebble keeps its memtables and block caches in C memory; glibc keeps
// what they free for reuse, so after a burst the read models' memory
// stayed resident, out of the Go runtime's reach.
func trimCHeap() { C.malloc_trim(0) }
