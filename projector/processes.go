package projector

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
)

// ProcessesFold is the name of the process read model's fold.
const ProcessesFold = "processes"

// Processes folds the PROCESSES stream into the process read model: each
// process as its log folds ("h/<pid>", JSON), and indexes by status
// ("s/<status>/<pid>") and by the sessions holding grants
// ("g/<session>/<pid>"), so listing the processes in one status or of one
// session costs what those do. A prune mark (<prefix>.proc.<pid>.gone)
// drops the process.
type Processes struct{ subj streams.Subjects }

// NewProcesses returns the fold for the deployment with prefix.
func NewProcesses(subj streams.Subjects) *Processes { return &Processes{subj: subj} }

// Name implements Fold.
func (f *Processes) Name() string { return ProcessesFold }

// Version implements Versioned.
func (f *Processes) Version() int { return 1 }

// Apply implements Fold.
func (f *Processes) Apply(tx *Txn, m *streams.Msg) error {
	pid, err := f.subj.ProcessOf(m.Subject)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPoison, err)
	}
	tok, _ := streams.Token(pid)
	if strings.HasSuffix(m.Subject, ".tree") {
		return nil // a budget of sub-agents (processes.Reserve), not a process
	}
	if strings.HasSuffix(m.Subject, ".gone") {
		// Pruned: the log is gone from the stream, so from the model.
		tx.SetMemo(tok, nil)
		return nil
	}
	e, err := processes.Decode(m.Data, m.Seq)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPoison, err)
	}
	p, err := readProcess(tx, tok)
	switch {
	case err == ErrNotFound && e.Type == processes.TypeRegistered:
		p = &processes.Process{ID: pid}
	case err == ErrNotFound:
		return fmt.Errorf("%w: event %d of process %s, which was never registered (or was pruned)", ErrPoison, e.N, pid)
	case err != nil:
		return err
	}
	next := *p
	if err := next.Apply(e); err != nil {
		return fmt.Errorf("%w: %v", ErrPoison, err)
	}
	tx.SetMemo(tok, &next)
	return nil
}

func readProcess(tx *Txn, tok string) (*processes.Process, error) {
	if p, ok := tx.Memo(tok); ok {
		if p == nil {
			return nil, ErrNotFound
		}
		return p.(*processes.Process), nil
	}
	v, err := tx.Get(key([]byte("h"), []byte(tok)))
	if err != nil {
		return nil, err
	}
	var p processes.Process
	return &p, json.Unmarshal(v, &p)
}

// indexKeys are the index entries of p.
func indexKeys(tok string, p *processes.Process) [][]byte {
	keys := [][]byte{key([]byte("s"), []byte(p.Status()), []byte(tok))}
	for _, s := range p.Grants {
		if st, err := streams.Token(s); err == nil {
			keys = append(keys, key([]byte("g"), []byte(st), []byte(tok)))
		}
	}
	return keys
}

// Flush implements Flusher: it writes each process changed in this Txn
// and moves its index entries from what the store held.
func (f *Processes) Flush(tx *Txn) error {
	return tx.Changed(func(tok string, v any) error {
		p, _ := v.(*processes.Process) // nil: pruned
		if old, err := tx.Get(key([]byte("h"), []byte(tok))); err == nil {
			var was processes.Process
			if json.Unmarshal(old, &was) == nil {
				for _, k := range indexKeys(tok, &was) {
					if err := tx.Delete(k); err != nil {
						return err
					}
				}
			}
		} else if err != ErrNotFound {
			return err
		}
		if p == nil {
			return tx.Delete(key([]byte("h"), []byte(tok)))
		}
		data, err := json.Marshal(p)
		if err != nil {
			return err
		}
		if err := tx.Set(key([]byte("h"), []byte(tok)), data); err != nil {
			return err
		}
		for _, k := range indexKeys(tok, p) {
			if err := tx.Set(k, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// Reads of the process read model; WaitFor first to read your own writes.

func (p *Projector) processesKey(parts ...[]byte) []byte {
	return foldKey(ProcessesFold, key(parts...))
}

// Process returns a process as the read model holds it, or ErrNotFound.
func (p *Projector) Process(id string) (*processes.Process, error) {
	tok, err := streams.Token(id)
	if err != nil {
		return nil, err
	}
	v, err := get(p.db, p.processesKey([]byte("h"), []byte(tok)))
	if err != nil {
		return nil, err
	}
	var out processes.Process
	return &out, json.Unmarshal(v, &out)
}

// ProcessesIn lists the processes in status, by id token.
func (p *Projector) ProcessesIn(status processes.Status) ([]*processes.Process, error) {
	return p.processesUnder(p.processesKey([]byte("s"), []byte(status), nil))
}

// ProcessesOf lists the processes session holds a grant on, by id token.
func (p *Projector) ProcessesOf(session string) ([]*processes.Process, error) {
	tok, err := streams.Token(session)
	if err != nil {
		return nil, err
	}
	return p.processesUnder(p.processesKey([]byte("g"), []byte(tok), nil))
}

func (p *Projector) processesUnder(prefix []byte) ([]*processes.Process, error) {
	var out []*processes.Process
	err := scan(p.db, prefix, func(k, _ []byte) error {
		tok := string(k[len(prefix):])
		id, err := streams.ParseToken(tok)
		if err != nil {
			return err
		}
		proc, err := p.Process(id)
		if err != nil {
			return err
		}
		out = append(out, proc)
		return nil
	})
	return out, err
}
