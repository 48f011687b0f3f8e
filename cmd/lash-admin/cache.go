package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
)

// cache is lash-admin's copy of the deployment's read models: the session
// projection ("projection") and the signal projection ("signals"), each a
// Pebble store, and a stamp naming the streams they were folded from
// ("deployment"): a store folded from a stream since deleted and made
// again (a wiped server on the same URL, say) is thrown away, not mixed
// with the new one.
type cache struct {
	p       *projector.Projector // sessions
	signals *projector.Projector
	procs   *projector.Projector
	root    string
	temp    bool // a temporary directory, removed on close
}

// stamp names the streams a cache was folded from.
type stamp struct {
	Prefix    string    `json:"prefix"`
	Sessions  time.Time `json:"sessions_created"`
	Triggers  time.Time `json:"triggers_created"`
	Processes time.Time `json:"processes_created"`
}

// cacheRoot is --cache, or a directory per deployment (URL and prefix)
// under the user's cache directory.
func (a *app) cacheRoot() (string, error) {
	if a.cacheDir != "" {
		return a.cacheDir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (give --cache): %w", err)
	}
	url, err := a.url()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(url + "\n" + a.client.Config().Prefix))
	return filepath.Join(base, "lash-admin", hex.EncodeToString(sum[:6])), nil
}

// errCacheBusy: another process has the cache open.
var errCacheBusy = errors.New("in use by another process")

// openCache opens the cache. A cache another lash-admin holds, or one that
// cannot be opened, is replaced by a temporary one unless strict is set.
func (a *app) openCache(strict bool) (*cache, error) {
	root, err := a.cacheRoot()
	if err != nil {
		return nil, err
	}
	c, err := a.openCacheAt(root)
	if err == nil || strict {
		return c, err
	}
	if !errors.Is(err, errCacheBusy) {
		fmt.Fprintf(a.stderr, "lash-admin: %s; reading through a temporary copy\n", oneLine(err.Error()))
	}
	tmp, terr := os.MkdirTemp("", "lash-admin-")
	if terr != nil {
		return nil, fmt.Errorf("%v; and no temporary directory: %w", err, terr)
	}
	c, err = a.openCacheAt(tmp)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	c.temp = true
	return c, nil
}

func (a *app) openCacheAt(root string) (*cache, error) {
	open := func(name string, open func(string, *streams.Client) (*projector.Projector, error)) (*projector.Projector, error) {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("cache %s: %w", root, err)
		}
		p, err := open(dir, a.client)
		switch {
		case err != nil && locked(err):
			return nil, fmt.Errorf("cache %s: %w", root, errCacheBusy)
		case err != nil:
			return nil, fmt.Errorf("cache %s is unusable (remove it; lash-admin rebuild makes it again): %w", root, err)
		}
		return p, nil
	}
	p, err := open("projection", lash.OpenProjection)
	if err != nil {
		return nil, err
	}
	sig, err := open("signals", lash.OpenSignalProjection)
	if err != nil {
		p.Close()
		return nil, err
	}
	procs, err := open("processes", lash.OpenProcessProjection)
	if err != nil {
		p.Close()
		sig.Close()
		return nil, err
	}
	c := &cache{p: p, signals: sig, procs: procs, root: root}
	if err := c.checkStamp(a); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// locked reports whether Pebble could not lock the store: another
// process has it open.
func locked(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held")
}

// checkStamp throws the stores' content away if they were folded from
// another deployment, and stamps them with this one.
func (c *cache) checkStamp(a *app) error {
	infos, err := a.client.Info(a.ctx)
	if err != nil {
		return err
	}
	sessions, triggers, procs := infos[streams.Sessions], infos[streams.Triggers], infos[streams.Processes]
	want := stamp{Prefix: a.client.Config().Prefix, Sessions: sessions.Created.UTC(), Triggers: triggers.Created.UTC(), Processes: procs.Created.UTC()}
	path := filepath.Join(c.root, "deployment")
	var got stamp
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &got)
	}
	same := err == nil && got.Prefix == want.Prefix && got.Sessions.Equal(want.Sessions) && got.Triggers.Equal(want.Triggers) &&
		got.Processes.Equal(want.Processes)
	if same && c.p.Applied() <= sessions.LastSeq && c.signals.Applied() <= triggers.LastSeq && c.procs.Applied() <= procs.LastSeq {
		return nil
	}
	for _, p := range []*projector.Projector{c.p, c.signals, c.procs} {
		if p.Applied() == 0 {
			continue
		}
		// Another deployment's fold (or one of unknown origin): start
		// over. Rebuild clears the store and folds this stream.
		fmt.Fprintf(a.stderr, "lash-admin: cache %s was folded from another deployment; rebuilding it\n", c.root)
		if err := p.Rebuild(a.ctx); err != nil {
			return err
		}
	}
	data, err = json.Marshal(want)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (c *cache) close() error {
	err := c.p.Close()
	for _, p := range []*projector.Projector{c.signals, c.procs} {
		if perr := p.Close(); err == nil {
			err = perr
		}
	}
	if c.temp {
		if rerr := os.RemoveAll(c.root); err == nil {
			err = rerr
		}
	}
	return err
}

// openedCache is the cache, opened once per run.
func (a *app) openedCache() (*cache, error) {
	if a.cache == nil {
		c, err := a.openCache(false)
		if err != nil {
			return nil, err
		}
		a.cache = c
	}
	return a.cache, nil
}

// processProjection is the process read model, caught up.
func (a *app) processProjection() (*projector.Projector, error) {
	c, err := a.openedCache()
	if err != nil {
		return nil, err
	}
	return c.procs, c.procs.CatchUp(a.ctx)
}

// signalProjection is the signal read model, caught up.
func (a *app) signalProjection() (*projector.Projector, error) {
	c, err := a.openedCache()
	if err != nil {
		return nil, err
	}
	return c.signals, c.signals.CatchUp(a.ctx)
}

// projection is the session read model, caught up with the session
// stream. A command that reads one session passes it: the fold then
// reaches at least that session's head as the stream's leader reports it,
// even through a lagging consumer on a cluster.
func (a *app) projection(session ...string) (*projector.Projector, error) {
	c, err := a.openedCache()
	if err != nil {
		return nil, err
	}
	p := c.p
	var through uint64
	for _, s := range session {
		subjects, err := a.logAndInputs(s)
		if err != nil {
			return nil, err
		}
		for _, subj := range subjects {
			m, err := a.client.Head(a.ctx, subj)
			if err == nil {
				through = max(through, m.Seq)
			} else if !errors.Is(err, streams.ErrNotFound) {
				return nil, err
			}
		}
	}
	deadline := time.Now().Add(streams.DefaultTimeout)
	for n := 0; ; n++ {
		if err := p.CatchUp(a.ctx); err != nil {
			return nil, err
		}
		if p.Applied() >= through {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("projection stops at sequence %d, before %d", p.Applied(), through)
		}
		select {
		case <-a.ctx.Done():
			return nil, a.ctx.Err()
		case <-time.After(time.Duration(min(n+1, 20)) * 5 * time.Millisecond):
		}
	}
}
