package projector

// NewTxnForTest gives in-package benchmarks a Txn outside a run.
func (p *Projector) NewTxnForTest() *Txn {
	return p.newTxn(map[string]map[string]any{}, func() error { return nil })
}

// Commit commits a test Txn.
func (t *Txn) Commit() error { return t.b.Commit(nil) }
