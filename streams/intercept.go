package streams

import (
	"context"
	"errors"
)

// Call names one round trip of a Client to the servers, as an Interceptor
// sees it.
//
// Op says what the call does:
//
//	append      a publish with an expected subject sequence (Append)
//	publish     a publish without one (Publish, replaced schedules)
//	batch       an atomic batch, all its messages and the commit (AppendBatch)
//	kv.create   a lease bucket key claimed (KVCreate)
//	kv.swap     a key replaced at a revision (KVSwap)
//	kv.delete   a key deleted at a revision (KVDelete)
//	kv.get      a key read (KVGet)
//	get         a message read through the stream API (Head, NextOnSubject)
//	direct.get  a message read by a direct get
//	direct.read up to a batch of messages read by one direct get
//	tail        a consumer made for a read (Read, Tail)
//	info        a stream's state read (LastSeq, Bounds, SubjectCounts,
//	            Info, KVList, LeaseRevision)
//	purge       messages removed (Purge, PurgeBefore)
//	blob.info   an object's metadata read
//	blob.put    an object stored, its chunks and its metadata
//	blob.list   the object store listed
//	consumer    a dispatcher's durable consumer made or updated
//	fetch       a dispatcher's pull of messages
//	ack         a delivery settled or kept (Ack, AckSync, Retry, InProgress)
//
// Subject is the subject the call writes or reads (for the lease bucket
// "$KV.<bucket>.<key>", for the object store "$O.<bucket>.<name>"), or the
// stream's name for calls on a whole stream.
type Call struct {
	Op      string
	Subject string
}

// Interceptor stands between a Client and the servers: every round trip of
// the client (Call) runs as do, through it. It may call do once and return
// what do returned (the call as it would be), return an error without
// calling do (the request never reached a server), call do and then return
// an error of its own (the reply was lost: a write may have landed), wait
// before calling do (a slow network), or call do more than once (a request
// repeated: writes are safe by msg id and compare-and-set). The caller sees
// what the last call of do produced, with the interceptor's error if it
// returns one; nil means the last call's own error. An interceptor that
// returns nil without calling do makes the call fail.
//
// It is set in Config.Intercept, for the client's life, and may be called
// from many goroutines at once. Topology (Open, Ensure, Bind, EnsureLive)
// and reading the stream handles a client keeps do not go through it.
type Interceptor func(ctx context.Context, call Call, do func(context.Context) error) error

// errNotCalled: an interceptor returned nil without calling do, so there is
// no answer to give.
var errNotCalled = errors.New("streams: the interceptor answered a call without making it")

// intercepted runs f through the client's interceptor. Callers test
// c.cfg.Intercept first and build f only when there is one: a call
// without an interceptor costs a nil check, no closure.
func intercepted[T any](c *Client, ctx context.Context, call Call, f func(context.Context) (T, error)) (T, error) {
	var out, zero T
	var last error
	called := false
	err := c.cfg.Intercept(ctx, call, func(ctx context.Context) error {
		called = true
		out, last = f(ctx)
		return last
	})
	switch {
	case err != nil:
		return zero, err
	case !called:
		return zero, errNotCalled
	}
	return out, last
}

// none is the result of calls that return only an error.
type none struct{}

func only(err error) (none, error) { return none{}, err }
