package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/nodeapi"
)

// programFlags are the flags of the programs commands.
type programFlags struct {
	file     string
	requires string
	id       string
}

var programsSaveCmd = &command{
	name:    "programs save",
	args:    "NAME",
	summary: "save a program under a name, as its next version",
	doc: `Reads a Starlark program (Code mode in the README) from --file (- for stdin), checks that
it parses, and saves it under NAME in the object store, named by its sha256: its next
version, unless it is one of its versions already. --requires names the tools it calls,
checked when it is started (programs start) and before every attempt of its process.`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.program.file, "f", "", "the program's `file` (- for stdin)")
		fs.StringVar(&a.program.file, "file", "", "the program's `file` (- for stdin)")
		fs.StringVar(&a.program.requires, "requires", "", "the `tools` it calls, separated by commas")
	},
	min: 1, max: 1,
	check: func(a *app, _ []string) error {
		if a.program.file == "" {
			return a.usagef("give the program's file: -f FILE (- for stdin)")
		}
		return nil
	},
	run: runProgramsSave,
}

var programsLsCmd = &command{
	name:    "programs ls",
	args:    "[NAME]",
	summary: "saved programs, or one's versions",
	doc:     `Lists the saved programs at their latest versions; with NAME, that program's versions, oldest first.`,
	max:     1,
	run:     runProgramsLs,
}

var programsShowCmd = &command{
	name:    "programs show",
	args:    "NAME[@VERSION]",
	summary: "a saved program's text",
	doc: `Prints a saved program: its latest version, or the one named: NAME@N (version N) or
NAME@HEX (the version whose sha256 starts with those hex digits, 8 at least).`,
	min: 1, max: 1,
	run: runProgramsShow,
}

var programsDeleteCmd = &command{
	name:    "programs delete",
	args:    "NAME",
	summary: "delete a saved program, every version",
	doc: `Deletes every version of a saved program. A process running one finishes its attempt;
an attempt after that fails, the program gone.`,
	min: 1, max: 1,
	run: runProgramsDelete,
}

var programsStartCmd = &command{
	name:    "programs start",
	args:    "NAME[@VERSION]",
	summary: "start a saved program as a background process",
	doc: `Starts a saved program as a process (the program tool, process_start): its version is
fixed when the process first runs, and it outlives the node running it. The tools it
requires must be built-ins, served over NATS now, or offered by a running node. --id
names the process (default: program-NAME-<time>); starting one of the same id again
starts nothing new.`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.program.id, "id", "", "the process's `id`")
	},
	min: 1, max: 1,
	run: runProgramsStart,
}

func runProgramsSave(a *app, args []string) error {
	var data []byte
	var err error
	if a.program.file == "-" {
		data, err = io.ReadAll(io.LimitReader(a.stdin, 1<<20))
	} else {
		data, err = os.ReadFile(a.program.file)
	}
	if err != nil {
		return err
	}
	var requires []string
	for _, t := range strings.Split(a.program.requires, ",") {
		if t = strings.TrimSpace(t); t != "" {
			requires = append(requires, t)
		}
	}
	v, err := lash.SaveProgram(a.ctx, a.client, args[0], string(data), requires)
	if errors.Is(err, lash.ErrBadInput) {
		return a.usagef("%s", strings.TrimPrefix(err.Error(), lash.ErrBadInput.Error()+": "))
	}
	if err != nil {
		return err
	}
	v.Program = ""
	return a.emit(v, func(w io.Writer) {
		row(w, v.Name, fmt.Sprintf("version %d", v.Version), "sum "+short(v.Sum), fmt.Sprintf("%d bytes", v.Bytes))
	})
}

func runProgramsLs(a *app, args []string) error {
	var list []lash.SavedProgram
	var err error
	if len(args) == 1 {
		list, err = lash.SavedProgramVersions(a.ctx, a.client, args[0])
	} else {
		list, err = lash.SavedPrograms(a.ctx, a.client)
	}
	if errors.Is(err, lash.ErrBadInput) {
		return a.usagef("%s", strings.TrimPrefix(err.Error(), lash.ErrBadInput.Error()+": "))
	}
	if err != nil {
		return err
	}
	if list == nil {
		list = []lash.SavedProgram{}
	}
	return a.emit(struct {
		Programs []lash.SavedProgram `json:"programs"`
	}{list}, func(w io.Writer) {
		row(w, "NAME", "VERSION", "SUM", "BYTES", "SAVED")
		for _, v := range list {
			row(w, v.Name, v.Version, short(v.Sum), v.Bytes, v.Saved.Format(time.RFC3339))
		}
	})
}

func (a *app) loadProgram(ref string) (*lash.SavedProgram, error) {
	v, err := lash.LoadProgram(a.ctx, a.client, ref)
	if errors.Is(err, lash.ErrBadInput) {
		return nil, a.usagef("%s", strings.TrimPrefix(err.Error(), lash.ErrBadInput.Error()+": "))
	}
	return v, err
}

func runProgramsShow(a *app, args []string) error {
	v, err := a.loadProgram(args[0])
	if err != nil {
		return err
	}
	if a.json {
		return a.emit(v, nil)
	}
	fmt.Fprintf(a.stdout, "# %s version %d (sum %s, saved %s", v.Name, v.Version, short(v.Sum), v.Saved.Format(time.RFC3339))
	if len(v.Requires) > 0 {
		fmt.Fprintf(a.stdout, ", requires %s", strings.Join(v.Requires, ", "))
	}
	fmt.Fprintf(a.stdout, ")\n%s", v.Program)
	if !strings.HasSuffix(v.Program, "\n") {
		fmt.Fprintln(a.stdout)
	}
	return nil
}

func runProgramsDelete(a *app, args []string) error {
	n, err := lash.DeleteProgram(a.ctx, a.client, args[0])
	if errors.Is(err, lash.ErrBadInput) {
		return a.usagef("%s", strings.TrimPrefix(err.Error(), lash.ErrBadInput.Error()+": "))
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", lash.ErrNoProgram, args[0])
	}
	out := struct {
		Program  string `json:"program"`
		Versions int    `json:"versions"`
	}{args[0], n}
	return a.emit(out, func(w io.Writer) { row(w, out.Program, fmt.Sprintf("%d versions deleted", n)) })
}

func runProgramsStart(a *app, args []string) error {
	v, err := a.loadProgram(args[0])
	if err != nil {
		return err
	}
	known, err := a.knownTools()
	if err != nil {
		return err
	}
	var missing []string
	for _, t := range v.Requires {
		if known != nil && !known(t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("program %s requires %s, which the deployment does not offer now", v.Name, strings.Join(missing, ", "))
	}
	id := a.program.id
	if id == "" {
		id = fmt.Sprintf("program-%s-%d", v.Name, time.Now().Unix())
	}
	// The version is named by its whole sum, so every attempt runs the one
	// checked here, however the versions are numbered by then.
	spec, err := json.Marshal(map[string]string{"saved": v.Name + "@" + v.Sum})
	if err != nil {
		return err
	}
	info, err := nodeapi.NewClient(a.nc, a.client.Config().Prefix).ProcessStart(a.ctx,
		nodeapi.ProcessStartRequest{ID: id, Tool: lash.BackgroundProgramTool, Args: spec})
	if err != nil {
		return err
	}
	return a.emit(info, func(w io.Writer) { row(w, info.ID, info.Status, fmt.Sprintf("%s version %d", v.Name, v.Version)) })
}
