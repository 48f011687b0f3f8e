package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/turn"
)

var verifyCmd = &command{
	name:    "verify",
	args:    "ID [TURN]",
	summary: "replay a session's turns through this build's machine",
	doc: `Replays a session's committed turns (or only TURN) through this build's turn machine,
feeding each effect its journaled outcome, and says per turn OK, DIVERGED, FAILED (it
was committed as failed and has nothing to replay) or UNVERIFIABLE (its journal is
gone). Each turn is replayed under the turn settings it ran with, read from the object
store by the fingerprint its commit carries: no machine flags are needed. With
--as-configured every turn is replayed under the settings the flags, environment and
config file give instead (--system, --model, ...): what a node started with them
would do. A divergence names the effect, the recorded and the current request hashes,
and diffs the requests: a deploy that would stop replay with a nondeterminism error.
Nothing is performed. Exits 1 when a turn diverged.`,
	min: 1, max: 2,
	check: checkVerify,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.BoolVar(&a.asConfigured, "as-configured", false, "replay under the machine settings given, not each turn's recorded ones")
	},
	settings: func(a *app, fs *flag.FlagSet) {
		a.machine.Register(fs)
		fs.StringVar(&a.script, "script", "", "lash-node's scripted model `file`: with no --model, the model name is \"scripted\", as lash-node makes it")
	},
	run: runVerify,
}

type verifyJSON struct {
	Session string             `json:"session"`
	OK      bool               `json:"ok"`
	Turns   []lash.TurnVerdict `json:"turns"`
}

func checkVerify(a *app, args []string) error {
	if err := a.machine.Validate(); err != nil {
		return err
	}
	if a.machine.ModelName == "" && a.script != "" {
		a.machine.ModelName = "scripted" // lash-node's default with --script
	}
	if len(args) > 1 {
		return a.checkTurn(args[1])
	}
	return nil
}

func runVerify(a *app, args []string) error {
	id, tid := args[0], a.turnArg
	in := lash.NewInspector(a.client)
	var rep *lash.VerifyReport
	var err error
	if a.asConfigured {
		rep, err = in.Verify(a.ctx, a.machine.Config(), id, tid)
	} else {
		rep, err = in.VerifyRecorded(a.ctx, turn.Hooks{}, id, tid)
	}
	switch {
	case errors.Is(err, lash.ErrUnknownSession):
		known, kerr := a.known(id)
		if kerr != nil {
			return kerr
		}
		if !known {
			return unknownSession(id)
		}
		if tid != "" {
			return fmt.Errorf("session %s has no committed turn %s", id, tid)
		}
		rep, err = &lash.VerifyReport{Session: id}, nil
	case errors.Is(err, lash.ErrBadInput) && tid != "":
		return fmt.Errorf("session %s has no committed turn %s", id, tid)
	case err != nil:
		return err
	}
	out := verifyJSON{Session: rep.Session, OK: rep.OK(), Turns: append([]lash.TurnVerdict{}, rep.Turns...)}
	err = a.emit(out, func(w io.Writer) {
		row(w, "TURN", "VERDICT", "REPLAYED", "NOTE")
		for _, v := range rep.Turns {
			note := v.Note
			if d := v.Divergence; d != nil {
				note = "at " + d.Key
			}
			row(w, v.Turn, strings.ToUpper(v.Verdict), v.Replayed, note)
		}
	})
	if err != nil || a.json {
		if err == nil && !rep.OK() {
			err = diverged(rep)
		}
		return err
	}
	// The divergences in full, after the table.
	for _, v := range rep.Turns {
		d := v.Divergence
		if d == nil {
			continue
		}
		fmt.Fprintf(a.stdout, "\n%s DIVERGED at %s\n  %s\n", v.Turn, d.Key, strings.ReplaceAll(d.Detail, "\n", "\n  "))
		if d.Recorded != "" || d.Current != "" {
			fmt.Fprintf(a.stdout, "  recorded request hash %s\n  current request hash  %s\n", d.Recorded, d.Current)
		}
		if d.Diff != "" {
			fmt.Fprintf(a.stdout, "  diff (- recorded, + current):\n    %s\n", strings.ReplaceAll(strings.TrimSuffix(d.Diff, "\n"), "\n", "\n    "))
		}
	}
	if !rep.OK() {
		return diverged(rep)
	}
	return nil
}

func diverged(rep *lash.VerifyReport) error {
	n := 0
	for _, v := range rep.Turns {
		if v.Divergence != nil {
			n++
		}
	}
	return fmt.Errorf("session %s: %d of %d turns diverged", rep.Session, n, len(rep.Turns))
}
