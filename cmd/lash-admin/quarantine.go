package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
)

var quarantineLsCmd = &command{
	name:    "quarantine ls",
	summary: "messages set aside: malformed inputs, log entries and signals, records no node or operator signed",
	doc: `Lists the messages lash-admin's projections set aside because they could not fold them
(an input that is not valid input JSON, a log entry this version cannot read, a signal
that is not JSON), and records on subjects of durable truth that no node or operator signed,
when the deployment signs its records and lash-admin has its secret (ADR 0036; fold
"signature"): the stream and sequence, subject, the fold that refused it, the start
of its payload, and why, in full, in the last column. The table clips a subject longer
than 80 characters (ending it with "..."); the JSON form carries every subject whole,
and the payload (as stored: at most 64 KiB) in base64. Requests the running nodes' API refused are listed too (stream "node-api",
the node in place of the fold): each node keeps its newest ones in memory, as they are
stored nowhere else.`,
	run: runQuarantineLs,
}

// subjectWidth is how much of a subject the table shows.
const subjectWidth = 80

type poisonJSON struct {
	Stream        string `json:"stream"`
	Seq           uint64 `json:"seq"`
	Subject       string `json:"subject"`
	Fold          string `json:"fold"`
	Reason        string `json:"reason"`
	Preview       string `json:"preview"`
	PayloadBase64 string `json:"payload_base64"`
	// At is set on node API refusals: when the node refused it.
	At *time.Time `json:"at,omitempty"`
}

type quarantineJSON struct {
	Quarantine []poisonJSON `json:"quarantine"`
}

func runQuarantineLs(a *app, _ []string) error {
	sessions, err := a.projection()
	if err != nil {
		return err
	}
	signals, err := a.signalProjection()
	if err != nil {
		return err
	}
	procs, err := a.processProjection()
	if err != nil {
		return err
	}
	out := quarantineJSON{Quarantine: []poisonJSON{}}
	for _, src := range []struct {
		p      *projector.Projector
		stream streams.Stream
	}{{sessions, streams.Sessions}, {signals, streams.Triggers}, {procs, streams.Processes}} {
		q, err := src.p.Quarantine()
		if err != nil {
			return err
		}
		for _, m := range q {
			out.Quarantine = append(out.Quarantine, poisonJSON{Stream: a.client.StreamName(src.stream), Seq: m.Seq, Subject: m.Subject,
				Fold: m.Fold, Reason: m.Reason, Preview: preview(m.Data, 60), PayloadBase64: base64.StdEncoding.EncodeToString(m.Data)})
		}
	}
	refused, err := nodeRefusals(a)
	if err != nil {
		return err
	}
	out.Quarantine = append(out.Quarantine, refused...)
	return a.emit(out, func(w io.Writer) {
		// The reason comes last and whole: a long one runs on without
		// widening the columns before it.
		row(w, "STREAM", "SEQ", "SUBJECT", "FOLD", "PAYLOAD", "REASON")
		for _, m := range out.Quarantine {
			row(w, m.Stream, m.Seq, clip(m.Subject, subjectWidth), m.Fold, m.Preview, m.Reason)
		}
	})
}

// nodeRefusals lists the requests the running nodes refused; with no node
// running there are none.
func nodeRefusals(a *app) ([]poisonJSON, error) {
	prefix := a.client.Config().Prefix
	ctx, cancel := context.WithTimeout(a.ctx, 2*time.Second)
	defer cancel()
	nodes, err := nodeapi.NewClient(a.client.Conn(), prefix).Nodes(ctx)
	if errors.Is(err, nodeapi.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []poisonJSON
	for _, n := range nodes {
		for _, r := range n.Refused {
			at := r.At
			out = append(out, poisonJSON{Stream: "node-api", Subject: nodeapi.Subject(prefix, r.Endpoint), Fold: "node " + n.Node,
				Reason: fmt.Sprintf("%d %s", r.Code, r.Reason), Preview: preview(r.Data, 60),
				PayloadBase64: base64.StdEncoding.EncodeToString(r.Data), At: &at})
		}
	}
	return out, nil
}
