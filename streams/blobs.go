package streams

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrCorrupt: a stored object's bytes do not match its name.
var ErrCorrupt = errors.New("streams: object does not match its content hash")

// blobBucket is the object store of large payloads.
func (c Config) blobBucket() string {
	return strings.ToUpper(strings.ReplaceAll(c.Prefix, "-", "_")) + "_BLOBS"
}

// blobStreamConfig is the object store's stream as the object store API
// lays it out, but without direct gets: an object is written before the
// record that names it, and a reader must not ask a follower that has not
// seen it yet.
func (c Config) blobStreamConfig() jetstream.StreamConfig {
	b := c.blobBucket()
	return jetstream.StreamConfig{
		Name:        "OBJ_" + b,
		Description: "lash payloads by reference, named by sha256",
		Subjects:    []string{"$O." + b + ".C.>", "$O." + b + ".M.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Replicas:    c.Replicas,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxMsgSize:  -1,
		Duplicates:  DefaultDuplicateWindow,
		AllowRollup: true,
		AllowDirect: false,
		Metadata:    c.metadata(),
	}
}

// BlobBucket is the name of the object store of large payloads.
func (c *Client) BlobBucket() string { return c.cfg.blobBucket() }

// blobName is the object name of content with sha256 sum.
func blobName(sum [32]byte) string { return hex.EncodeToString(sum[:]) }

// PutBlob stores data in the object store under its sha256, unless an
// object of that name is there already, and returns the sum. Putting the
// same bytes again, from any node, stores nothing more.
func (c *Client) PutBlob(ctx context.Context, data []byte) ([32]byte, error) {
	sum := sha256.Sum256(data)
	return sum, c.PutObject(ctx, blobName(sum), sum, nil, data)
}

// PutObject stores data, whose sha256 is sum, under name with metadata
// meta (what owns it, for the sweeps), unless an object of that name with
// those bytes is there already.
func (c *Client) PutObject(ctx context.Context, name string, sum [32]byte, meta map[string]string, data []byte) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	info, err := c.blobInfo(ctx, name)
	switch {
	case err == nil && info.Digest == digestOf(sum):
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return fmt.Errorf("streams: blob %s: %w", name, err)
	}
	if err := c.putBlob(ctx, name, meta, data); err != nil {
		if tooLarge(err) {
			return fmt.Errorf("%w: a chunk of blob %s", ErrTooLarge, name)
		}
		return fmt.Errorf("streams: put blob %s: %w", name, err)
	}
	return nil
}

// blobInfo reads the metadata of the object named name.
func (c *Client) blobInfo(ctx context.Context, name string) (*jetstream.ObjectInfo, error) {
	if c.cfg.Intercept != nil {
		return intercepted(c, ctx, Call{Op: "blob.info", Subject: c.metaSubject(name)}, func(ctx context.Context) (*jetstream.ObjectInfo, error) {
			return c.blobs.GetInfo(ctx, name)
		})
	}
	return c.blobs.GetInfo(ctx, name)
}

// putBlob stores data as the object named name: its chunks, then its
// metadata.
func (c *Client) putBlob(ctx context.Context, name string, meta map[string]string, data []byte) error {
	if c.cfg.Intercept != nil {
		_, err := intercepted(c, ctx, Call{Op: "blob.put", Subject: c.metaSubject(name)}, func(ctx context.Context) (none, error) {
			return only(c.putBlobOnce(ctx, name, meta, data))
		})
		return err
	}
	return c.putBlobOnce(ctx, name, meta, data)
}

func (c *Client) putBlobOnce(ctx context.Context, name string, meta map[string]string, data []byte) error {
	_, err := c.blobs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: meta}, bytes.NewReader(data))
	return err
}

// BlobSize returns the size of the object named by sum, or ErrNotFound.
func (c *Client) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	info, err := c.objectInfo(ctx, blobName(sum))
	if err != nil {
		return 0, err
	}
	return int64(info.Size), nil
}

func (c *Client) objectInfo(ctx context.Context, name string) (*jetstream.ObjectInfo, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var info *jetstream.ObjectInfo
	err := retryRead(ctx, func() (err error) {
		info, err = c.blobInfo(ctx, name)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, fmt.Errorf("%w: blob %s", ErrNotFound, name)
	case err != nil:
		return nil, fmt.Errorf("streams: blob %s: %w", name, err)
	}
	return info, nil
}

// GetBlob reads the object named by sum, refusing one over limit bytes
// (ErrTooLarge) before reading it. The bytes are checked against sum
// (ErrCorrupt). A missing object is ErrNotFound.
func (c *Client) GetBlob(ctx context.Context, sum [32]byte, limit int64) ([]byte, error) {
	return c.GetObject(ctx, blobName(sum), sum, limit)
}

// GetObject is GetBlob for the object named name, whose bytes hash to sum.
func (c *Client) GetObject(ctx context.Context, name string, sum [32]byte, limit int64) ([]byte, error) {
	var err error
	// A racing put of the same bytes by another node may replace the
	// object's chunks while this read is on them: read its new ones once.
	for range 2 {
		var data []byte
		if data, err = c.getObject(ctx, name, sum, limit); err == nil || !errors.Is(err, ErrCorrupt) {
			return data, err
		}
	}
	return nil, err
}

func (c *Client) getObject(ctx context.Context, name string, sum [32]byte, limit int64) ([]byte, error) {
	info, err := c.objectInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	if limit > 0 && info.Size > uint64(limit) {
		return nil, fmt.Errorf("%w: blob %s holds %d bytes, at most %d are read", ErrTooLarge, name, info.Size, limit)
	}
	data := make([]byte, 0, info.Size)
	if info.Size > 0 {
		err = c.Read(ctx, c.chunkSubject(info.NUID), 0, func(m *Msg) error {
			if uint64(len(data)+len(m.Data)) > info.Size {
				return fmt.Errorf("%w: blob %s has more than its %d bytes", ErrCorrupt, name, info.Size)
			}
			data = append(data, m.Data...)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if got := sha256.Sum256(data); got != sum {
		return nil, fmt.Errorf("%w: blob %s: read %d of %d bytes, sha256 %s", ErrCorrupt, name, len(data), info.Size, hex.EncodeToString(got[:8]))
	}
	return data, nil
}

func (c *Client) chunkSubject(nuid string) string { return "$O." + c.cfg.blobBucket() + ".C." + nuid }

func (c *Client) metaSubject(name string) string {
	return "$O." + c.cfg.blobBucket() + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// DeleteObject removes the object named name for good, its chunks and its
// meta (the object store's own delete leaves a marker that names it), and
// returns its size; a missing object is 0 and no error.
func (c *Client) DeleteObject(ctx context.Context, name string) (int64, error) {
	info, err := c.objectInfo(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// The meta first: a reader that finds no meta finds no object, so one
	// that stopped between the two purges leaves chunks no one reads,
	// which the sweep of orphan chunks takes.
	if err := c.Purge(ctx, c.metaSubject(name)); err != nil {
		return 0, err
	}
	if err := c.Purge(ctx, c.chunkSubject(info.NUID)); err != nil {
		return 0, err
	}
	return int64(info.Size), nil
}

// ObjectInfo is an object of the store as a sweep reads it.
type ObjectInfo struct {
	Name     string
	Size     int64
	Modified time.Time
	Metadata map[string]string
	// Sum is the sha256 of its bytes, as the store recorded it (the zero
	// sum if it recorded none it can read).
	Sum [32]byte
}

// Objects calls fn with every object of the store.
func (c *Client) Objects(ctx context.Context, fn func(ObjectInfo) error) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var list []*jetstream.ObjectInfo
	var err error
	if c.cfg.Intercept != nil {
		list, err = intercepted(c, ctx, Call{Op: "blob.list", Subject: "$O." + c.cfg.blobBucket() + ".M.>"}, func(ctx context.Context) ([]*jetstream.ObjectInfo, error) {
			return c.blobs.List(ctx)
		})
	} else {
		list, err = c.blobs.List(ctx)
	}
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("streams: list blobs: %w", err)
	}
	for _, o := range list {
		info := ObjectInfo{Name: o.Name, Size: int64(o.Size), Modified: o.ModTime, Metadata: o.Metadata}
		if d, ok := strings.CutPrefix(o.Digest, "SHA-256="); ok {
			if b, err := base64.URLEncoding.DecodeString(d); err == nil && len(b) == len(info.Sum) {
				copy(info.Sum[:], b)
			}
		}
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// digestOf is how the object store API spells a sha256 digest.
func digestOf(sum [32]byte) string { return "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]) }
