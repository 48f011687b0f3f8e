package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/lash-run/lash/streams"
)

// A read model folds deletion marks to drop what was deleted. A sweep
// removes marks older than MarkTTL, and raises the stream's watermark to
// the last one it removed: a read model whose folding stands below it may
// have missed a mark, and is rebuilt from the stream (Stale).

func watermarkKey(s streams.Stream) string { return "lifecycle.marks." + strconv.Itoa(int(s)) }

// RaiseWatermark moves stream s's watermark up to seq.
func RaiseWatermark(ctx context.Context, c *streams.Client, s streams.Stream, seq uint64) error {
	key := watermarkKey(s)
	for range 8 {
		e, err := c.KVGet(ctx, key)
		switch {
		case errors.Is(err, streams.ErrNotFound):
			_, err = c.KVCreate(ctx, key, []byte(strconv.FormatUint(seq, 10)), 0)
		case err != nil:
			return err
		default:
			if cur, _ := strconv.ParseUint(string(e.Value), 10, 64); cur >= seq {
				return nil
			}
			_, err = c.KVSwap(ctx, key, []byte(strconv.FormatUint(seq, 10)), e.Revision, 0)
		}
		if !errors.Is(err, streams.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("lifecycle: the watermark of %s kept moving", c.StreamName(s))
}

// Watermark is stream s's watermark: 0 while no mark was removed.
func Watermark(ctx context.Context, c *streams.Client, s streams.Stream) (uint64, error) {
	e, err := c.KVGet(ctx, watermarkKey(s))
	if errors.Is(err, streams.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(e.Value), 10, 64)
}

// Stale reports whether a read model of stream s that folded through
// applied may have missed a deletion mark a sweep removed since.
func Stale(ctx context.Context, c *streams.Client, s streams.Stream, applied uint64) (bool, error) {
	w, err := Watermark(ctx, c, s)
	return err == nil && applied < w, err
}
