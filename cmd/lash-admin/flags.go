package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/lash-run/lash/internal/cli"
)

// settingsFlags defines the settings: the global ones, then the command's.
// Settings come from the command line, the LASH_ environment and the
// config file, as lash-node's do.
func (a *app) settingsFlags(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet("lash-admin", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.conn.Register(fs, "NATS server `URL` (default: lash-node's embedded server, at --listen)")
	fs.StringVar(&a.listen, "listen", defaultListen, "client `address` of lash-node's embedded server (lash-node's --listen): with no --nats, lash-admin connects there")
	fs.StringVar(&a.data, "data", "lash-data", "lash-node's data `directory`: with no --nats and no credentials given, lash-admin signs in to the embedded server with the password lash-node keeps there (embedded-password), if any")
	fs.StringVar(&a.secret, "secret-file", "", "`file` holding the deployment's secret (lash-node's --secret-file): lash-admin signs what it writes and checks what it reads (default: with no --nats, <data>/secret, if there)")
	fs.StringVar(&a.cacheDir, "cache", "", "`directory` of lash-admin's projection cache (default: one per deployment under the user cache directory)")
	fs.StringVar(&a.config, "config", "", "settings `file`: \"name = value\" lines; lash-node's file will do")
	if cmd != nil && cmd.settings != nil {
		cmd.settings(a, fs)
	}
	return fs
}

// commandFlags defines the command's own flags.
func (a *app) commandFlags(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&a.json, "json", false, "print JSON")
	if cmd.flags != nil {
		cmd.flags(a, fs)
	}
	return fs
}

// parse sets the settings and the command's flags from args, in which
// flags and positional arguments may mix, and returns the positional ones.
func (a *app) parse(args []string) ([]string, error) {
	settings, flags := a.settingsFlags(a.cmd), a.commandFlags(a.cmd)
	var setArgs, flagArgs, pos []string
	config, configGiven := "", false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !isFlag(arg) {
			pos = append(pos, arg)
			continue
		}
		name, value, hasValue := splitFlag(arg)
		if name == "h" || name == "help" {
			a.commandUsage(a.stdout, a.cmd)
			return nil, errHelp
		}
		f, to := flags.Lookup(name), &flagArgs
		if f == nil {
			f, to = settings.Lookup(name), &setArgs
		}
		if f == nil {
			return nil, a.usagef("unknown flag %s", arg)
		}
		*to = append(*to, arg)
		if !isBool(f) && !hasValue {
			if i+1 >= len(args) {
				return nil, a.usagef("flag %s needs a value", arg)
			}
			i++
			value = args[i]
			*to = append(*to, value)
		}
		if name == "config" {
			config, configGiven = value, true
		}
	}
	if err := flags.Parse(flagArgs); err != nil {
		return nil, a.usagef("%v", err)
	}
	if !configGiven {
		config = os.Getenv(cli.EnvName(envPrefix, "config"))
	}
	if config != "" {
		// The file is lash-node's too: its settings that lash-admin does
		// not have are accepted and ignored. cli.Parse refuses names its
		// flag set lacks, so they are defined here as settings that do
		// nothing.
		file, err := cli.ReadFile(config)
		if err != nil {
			return nil, err
		}
		for name := range file {
			if settings.Lookup(name) == nil {
				settings.String(name, "", "")
			}
		}
	}
	if _, err := cli.Parse(settings, setArgs, envPrefix, a.conn.Aliases()); err != nil {
		return nil, err
	}
	return pos, nil
}

// isFlag reports whether arg is a flag ("-" alone is an argument: stdin).
func isFlag(arg string) bool { return len(arg) > 1 && arg[0] == '-' }

// splitFlag splits "-name", "--name" or "--name=value".
func splitFlag(arg string) (name, value string, hasValue bool) {
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, value, hasValue = strings.Cut(name, "=")
	return name, value, hasValue
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// printFlags lists a command's own flags, as --name VALUE and their help.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, help := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if kind != "" && !isBool(f) {
			head += " " + kind
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, head)
		for _, line := range cli.Wrap(help+def, 72) {
			fmt.Fprintf(w, "      %s\n", line)
		}
	})
}

// usage is lash-admin --help.
func (a *app) usage(w io.Writer) {
	fmt.Fprint(w, `lash-admin inspects and operates a lash deployment.

Usage: lash-admin [global flags] COMMAND [flags] [ARGS]

Commands:
`)
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.name)+1+len(c.args))
	}
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(w, "  %-*s  %s\n", width, "help [COMMAND]", "this help, or a command's or a group's")
	fmt.Fprintf(w, `
Read commands print a table, or one JSON document with --json. "lash-admin COMMAND -h"
describes a command and its flags, "lash-admin GROUP -h" the subcommands of a group
(%s). Flags may come before or after the arguments;
"--" ends them, for an argument that starts with "-".

Global settings come from the command line, the environment and the --config file,
in that order of precedence, as lash-node's do: one environment configures both, and
lash-admin ignores the settings of lash-node's it has no use for.

`, strings.Join(groups(), ", "))
	fs := a.settingsFlags(nil)
	cli.Usage(w, fs, envPrefix, a.conn.Aliases(), []cli.Section{
		{Title: "Connection (as lash-node's)", Names: []string{"nats", "listen", "creds", "user", "password", "tls-cert", "tls-key", "tls-ca", "prefix", "replicas", "secret-file"}},
		{Title: "lash-admin", Names: []string{"cache", "config"}},
	})
	fmt.Fprint(w, `Every command takes:
  --json
      print JSON

Exit status: 0 on success, 1 on a runtime error, 2 on invalid usage; the error is one
line on stderr.
`)
}

// commandUsage is lash-admin COMMAND -h.
func (a *app) commandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: lash-admin %s [flags]\n\n%s\n\nFlags:\n", strings.TrimSpace(c.name+" "+c.args), c.doc)
	printFlags(w, a.commandFlags(c))
	if c.settings != nil {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.settings(a, fs)
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		fmt.Fprintln(w)
		cli.Usage(w, fs, envPrefix, nil, []cli.Section{{Title: "Settings (as lash-node's)", Names: names}})
	} else {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Global settings: lash-admin --help.")
}

// groupUsage is lash-admin GROUP -h: the group's subcommands.
func (a *app) groupUsage(w io.Writer, group string) {
	cmds := groupCommands(group)
	fmt.Fprintf(w, "Usage: lash-admin %s SUBCOMMAND [flags] [ARGS]\n\nSubcommands:\n", group)
	heads := make([]string, len(cmds))
	width := 0
	for i, c := range cmds {
		_, sub, _ := strings.Cut(c.name, " ")
		heads[i] = strings.TrimSpace(sub + " " + c.args)
		width = max(width, len(heads[i]))
	}
	for i, c := range cmds {
		fmt.Fprintf(w, "  %-*s  %s\n", width, heads[i], c.summary)
	}
	fmt.Fprintf(w, `
A subcommand's arguments and flags: lash-admin %[1]s SUBCOMMAND -h
(or lash-admin help %[1]s SUBCOMMAND). Global settings: lash-admin --help.
`, group)
}

// help is lash-admin help [COMMAND], where COMMAND may be a group.
func (a *app) help(args []string) error {
	if len(args) == 0 {
		a.usage(a.stdout)
		return errHelp
	}
	c, n := lookup(args)
	if c == nil || n != len(args) {
		if len(args) == 1 && len(groupCommands(args[0])) > 0 {
			a.groupUsage(a.stdout, args[0])
			return errHelp
		}
		return a.usagef("help: unknown command %q", strings.Join(args, " "))
	}
	a.commandUsage(a.stdout, c)
	return errHelp
}
