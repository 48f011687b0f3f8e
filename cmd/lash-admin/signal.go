package main

import (
	"encoding/json"
	"fmt"
	"github.com/oklog/ulid/v2"
	"io"
	"strings"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/streams"
)

var signalCmd = &command{
	name:    "signal",
	args:    "SUBJECT JSON",
	summary: "publish a signal on <prefix>.signal.SUBJECT",
	doc: `Publishes JSON, which must be valid JSON (at most 64 KiB), as a signal on <prefix>.signal.SUBJECT, where
the TRIGGERS stream captures it; SUBJECT may be given with or without that prefix. With
--key the publish carries it as Nats-Msg-Id, so the stream keeps one signal per key
within its dedupe window. JSON "-" reads the payload from stdin.`,
	min: 2, max: 2,
	flags: keyFlag,
	check: checkSignal,
	run:   runSignal,
}

type signalJSON struct {
	Subject   string `json:"subject"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Key       string `json:"key"`
}

// signalSubject is the full subject of a signal; SUBJECT may carry the
// prefix already. Wildcards and empty tokens are refused.
func signalSubject(prefix, subject string) (string, error) {
	rest := strings.TrimPrefix(subject, prefix+".signal.")
	if rest == "" {
		return "", fmt.Errorf("the signal subject is empty")
	}
	for _, tok := range strings.Split(rest, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return "", fmt.Errorf("signal subject %q: tokens must be non-empty, without wildcards or spaces", subject)
		}
	}
	return prefix + ".signal." + rest, nil
}

func checkSignal(a *app, args []string) error {
	subj, err := signalSubject(a.conn.Streams().Prefix, args[0])
	if err != nil {
		return a.usagef("%v", err)
	}
	if err := checkKey(a.key); err != nil {
		return a.usagef("%v", err)
	}
	data := []byte(args[1])
	if args[1] == "-" {
		if data, err = io.ReadAll(io.LimitReader(a.stdin, lash.MaxSignalBytes+1)); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	}
	if err := lash.CheckSignal(data); err != nil {
		var v any
		if jerr := json.Unmarshal(data, &v); jerr != nil {
			err = fmt.Errorf("%v (%v)", err, jerr)
		}
		return a.usagef("%v", err)
	}
	if a.key == "" {
		a.key = ulid.Make().String()
	}
	a.signal = streams.Publication{Subject: subj, Data: data, MsgID: a.key}
	return nil
}

func runSignal(a *app, _ []string) error {
	seq, dup, err := a.client.Publish(a.ctx, a.signal)
	if err != nil {
		return err
	}
	subj := a.signal.Subject
	out := signalJSON{Subject: subj, Seq: seq, Duplicate: dup, Key: a.key}
	return a.emit(out, func(w io.Writer) {
		if dup {
			fmt.Fprintf(w, "signal on %s was published before with key %s, at sequence %d (duplicate; nothing published)\n", subj, a.key, seq)
			return
		}
		fmt.Fprintf(w, "signal published on %s at sequence %d\n", subj, seq)
	})
}
