package processes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lash-run/lash/streams"
)

// Budget bounds the sub-agents of one tree: those a turn of a top-level
// session starts, and theirs, at any depth.
type Budget struct {
	// PerTree bounds the sub-agents of the tree in all.
	PerTree int
	// PerSession bounds the sub-agents one session of the tree starts.
	PerSession int
}

// DefaultBudget is the budget of a tree when none is set.
var DefaultBudget = Budget{PerTree: 32, PerSession: 8}

// ErrBudget: the tree, or the session in it, has started as many
// sub-agents as its budget allows.
var ErrBudget = errors.New("processes: sub-agent budget spent")

// TreeID names the tree of sub-agents that the turn of a top-level
// session starts.
func TreeID(session, turn string) string {
	sum := sha256.Sum256([]byte("tree\x00" + session + "\x00" + turn))
	return "t-" + hex.EncodeToString(sum[:12])
}

// tree is a tree's budget record, one JSON state per message on
// <prefix>.proc.<tree>.tree, each a compare-and-set on the last. Sessions
// are named by a hash: the record outlives a deleted session, and keeps
// none of its ids.
type tree struct {
	V        int            `json:"v"`
	N        int            `json:"n"`
	Sessions map[string]int `json:"sessions"`
	Pids     []string       `json:"pids"`
	At       time.Time      `json:"at"`
}

func sessionKey(session string) string {
	sum := sha256.Sum256([]byte(session))
	return hex.EncodeToString(sum[:8])
}

// Reserve takes a place in tree for the sub-agent pid that session
// starts, within b: ErrBudget once the tree holds b.PerTree sub-agents or
// session started b.PerSession. A pid that holds a place already takes no
// other, so a spawn run again after a crash is not counted twice. The
// place is taken before the sub-agent is registered and never given back:
// a registration that fails after it spends it.
func (r *Registry) Reserve(ctx context.Context, treeID, session, pid string, b Budget) error {
	subj, err := r.s.Subjects().ProcessTree(treeID)
	if err != nil {
		return fmt.Errorf("%w: tree: %v", ErrInvalid, err)
	}
	key := sessionKey(session)
	for range appendTries {
		var t tree
		var head uint64
		m, err := r.s.Head(ctx, subj)
		switch {
		case errors.Is(err, streams.ErrNotFound):
		case err != nil:
			return fmt.Errorf("tree %s: %w", treeID, err)
		default:
			head = m.Seq
			if err := json.Unmarshal(m.Data, &t); err != nil || t.V != Version {
				return fmt.Errorf("%w: tree %s: its budget record is unreadable", ErrCorrupt, treeID)
			}
		}
		if slices.Contains(t.Pids, pid) {
			return nil
		}
		if t.N >= b.PerTree {
			return fmt.Errorf("%w: this task's sub-agents number %d, at most %d", ErrBudget, t.N, b.PerTree)
		}
		if t.Sessions[key] >= b.PerSession {
			return fmt.Errorf("%w: this conversation started %d sub-agents, at most %d", ErrBudget, t.Sessions[key], b.PerSession)
		}
		if t.Sessions == nil {
			t.Sessions = map[string]int{}
		}
		t.V, t.N, t.At = Version, t.N+1, r.now().UTC()
		t.Sessions[key]++
		t.Pids = append(t.Pids, pid)
		data, err := json.Marshal(t)
		if err != nil {
			return err
		}
		_, _, err = r.s.Append(ctx, streams.Publication{Subject: subj, Data: data, MsgID: fmt.Sprintf("tree:%s:%d:%s", subj, head, pid)}, head)
		if err == nil {
			return nil
		}
		if !errors.Is(err, streams.ErrConflict) {
			return fmt.Errorf("tree %s: %w", treeID, err)
		}
	}
	return fmt.Errorf("tree %s: the budget record kept moving under %d tries", treeID, appendTries)
}

// pruneTrees removes the budget records of trees none of whose sub-agents
// is still registered (the processes pruned, or never registered) and
// whose last place was taken before cutoff: no turn of the tree can start
// another.
func (r *Registry) pruneTrees(ctx context.Context, registered map[string]bool, cutoff time.Time) error {
	subj := r.s.Subjects()
	last := map[string]tree{}
	err := r.s.Read(ctx, subj.AllProcessTrees(), 1, func(m *streams.Msg) error {
		var t tree
		if json.Unmarshal(m.Data, &t) == nil {
			last[m.Subject] = t
		}
		return nil
	})
	if err != nil {
		return err
	}
	for s, t := range last {
		if !t.At.Before(cutoff) || slices.ContainsFunc(t.Pids, func(pid string) bool { return registered[pid] }) {
			continue
		}
		if err := r.s.Purge(ctx, s); err != nil {
			return fmt.Errorf("pruning a tree's budget: %w", err)
		}
	}
	return nil
}
