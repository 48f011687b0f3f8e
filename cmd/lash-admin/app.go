package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
)

// defaultListen is where a lash-node with default settings listens: its
// embedded server, on loopback.
const defaultListen = "127.0.0.1:4222"

// envPrefix is lash-node's: one environment configures both commands.
const envPrefix = "LASH_"

// command is one lash-admin command.
type command struct {
	name     string // "sessions show"
	args     string // its positional arguments, as usage shows them
	summary  string // one line for the command list
	doc      string // what -h says after the usage line
	min, max int    // how many positional arguments it takes
	// flags defines the command's own flags: they come from the command
	// line only, never from the environment or the config file.
	flags func(a *app, fs *flag.FlagSet)
	// settings defines settings beyond the global ones; like those, they
	// also come from the environment and the config file.
	settings func(a *app, fs *flag.FlagSet)
	// check, if set, validates the arguments before lash-admin connects:
	// invalid usage is refused the same with or without a server.
	check func(a *app, args []string) error
	run   func(a *app, args []string) error
	// offline commands need no server.
	offline bool
}

// commands lists the commands in the order help shows them.
func commands() []*command {
	return []*command{sessionsLsCmd, sessionsShowCmd, sessionsDeleteCmd, transcriptCmd, turnsCmd, settingsCmd, effectsCmd,
		processesLsCmd, processesShowCmd, processesEventsCmd, processesCancelCmd, processesAbandonCmd,
		processesGrantCmd, processesRevokeCmd, processesPruneCmd,
		triggersLsCmd, triggersShowCmd, triggersRegisterCmd, triggersEnableCmd, triggersDisableCmd, triggersDeleteCmd,
		triggersReviveCmd, triggersOccurrencesCmd, triggersDeliveriesCmd, triggersScheduleCmd, triggersUnscheduleCmd,
		triggersSchedulesCmd, agentsLsCmd, agentsShowCmd, agentsHistoryCmd, agentsDiffCmd, agentsApplyCmd, agentsDeleteCmd,
		programsLsCmd, programsShowCmd, programsSaveCmd, programsStartCmd, programsDeleteCmd,
		waitsLsCmd, waitsCancelCmd, waitsRevokeCmd,
		leasesLsCmd, nodesLsCmd, streamsCmd, storageCmd, storageSweepCmd, quarantineLsCmd,
		watchCmd, sendCmd, decideCmd, cancelCmd, signalCmd, uiCmd, rebuildCmd, verifyCmd, permissionsCmd, apiTokenCmd}
}

// app is one run of lash-admin.
type app struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// errTTY is set when stderr is a terminal: progress redraws in place.
	errTTY bool

	cmd *command
	// Settings.
	conn     cli.Conn
	listen   string
	data     string
	secret   string // --secret-file
	cacheDir string
	config   string
	machine  cli.Machine
	script   string // lash-node's --script, for verify's model name
	leaseTTL time.Duration
	// Command flags.
	json               bool
	asConfigured       bool
	key, payload, mode string
	// from: watch's cursor; wait and waitTimeout: send --wait.
	from        uint64
	wait        bool
	sendAgent   string
	waitTimeout time.Duration
	followFlag  bool // transcript --follow
	// httpAddr and readOnly: the ui command's flags.
	httpAddr   string
	readOnly   bool
	allowHosts string
	agent      agentFlags
	program    programFlags
	// limit and after page sessions ls.
	limit               int
	after               string
	sortBy, stateFilter string
	// labels: --label KEY=VALUE, on send (set) and sessions ls (filter).
	labels labelFlag
	// perm: the permissions command's flags.
	perm  permFlags
	token tokenFlags
	// status, session and reason: the processes commands' flags.
	status, session, reason string
	olderThan               time.Duration
	// trig: the triggers commands' flags.
	trig triggerFlags
	// sweep: storage sweep's flags.
	sweep lifecycle.SweepConfig
	// What check prepared: an input to append, a signal to publish, a
	// turn id.
	input   lash.Input
	signal  streams.Publication
	turnArg string

	nc     *nats.Conn
	client *streams.Client
	cache  *cache
}

// errHelp ends a run that printed help.
var errHelp = errors.New("help")

// usageError is invalid usage: printed in a line, exit status 2.
type usageError struct {
	cmd string // the command, or "" before one is known
	msg string
}

func (e *usageError) Error() string {
	see := "lash-admin --help"
	if e.cmd != "" {
		see = "lash-admin " + e.cmd + " -h"
	}
	return e.msg + " (see " + see + ")"
}

func (a *app) usagef(format string, args ...any) error {
	name := ""
	if a.cmd != nil {
		name = a.cmd.name
	}
	return &usageError{cmd: name, msg: fmt.Sprintf(format, args...)}
}

// Run runs lash-admin with args (without the program name) and returns its
// exit status.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			a.errTTY = true
		}
	}
	err := a.main(args)
	if cerr := a.close(); err == nil {
		err = cerr
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue), errors.Is(err, cli.ErrUsage):
		fmt.Fprintln(stderr, "lash-admin: "+oneLine(err.Error()))
		return 2
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "lash-admin: interrupted")
		return 1
	}
	fmt.Fprintln(stderr, "lash-admin: "+oneLine(err.Error()))
	return 1
}

// oneLine keeps an error on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func (a *app) main(args []string) error {
	// Global flags may come before the command.
	probe := a.settingsFlags(nil)
	probe.BoolVar(new(bool), "json", false, "")
	i := 0
	for i < len(args) {
		arg := args[i]
		if arg == "--" || !isFlag(arg) {
			break
		}
		name, _, hasValue := splitFlag(arg)
		if name == "h" || name == "help" {
			a.usage(a.stdout)
			return errHelp
		}
		if cli.IsVersionFlag(arg) {
			fmt.Fprintln(a.stdout, "lash-admin", cli.Version(version))
			return errHelp
		}
		f := probe.Lookup(name)
		if f == nil {
			return a.usagef("unknown flag %s before the command", arg)
		}
		if !isBool(f) && !hasValue {
			i++
		}
		i++
	}
	if i < len(args) && args[i] == "--" {
		return a.usagef("no command before --")
	}
	if i >= len(args) {
		return a.usagef("no command")
	}
	if args[i] == "help" {
		return a.help(args[i+1:])
	}
	cmd, n := lookup(args[i:])
	if cmd == nil {
		group := args[i]
		subs := subcommands(group)
		if len(subs) == 0 {
			return a.usagef("unknown command %q", group)
		}
		if asksHelp(args[i+1:]) {
			a.groupUsage(a.stdout, group)
			return errHelp
		}
		what := "give a subcommand:"
		if len(args) > i+1 {
			what = fmt.Sprintf("unknown subcommand %q; give", args[i+1])
		}
		return &usageError{cmd: group, msg: fmt.Sprintf("%s: %s %s", group, what, strings.Join(subs, " or "))}
	}
	a.cmd = cmd
	rest := append(append([]string(nil), args[:i]...), args[i+n:]...)
	pos, err := a.parse(rest)
	if err != nil {
		return err
	}
	if len(pos) < cmd.min || cmd.max >= 0 && len(pos) > cmd.max {
		if cmd.args == "" {
			return a.usagef("%s takes no arguments, got %q", cmd.name, strings.Join(pos, " "))
		}
		got := "no arguments"
		if len(pos) > 0 {
			got = fmt.Sprintf("%q", pos)
		}
		return a.usagef("%s: want %s, got %s", cmd.name, cmd.args, got)
	}
	if strings.HasPrefix(cmd.args, "ID") && pos[0] == "" {
		return a.usagef("the session id is empty")
	}
	if err := a.conn.Validate(); err != nil {
		return err
	}
	if _, err := a.url(); err != nil {
		return err
	}
	if cmd.check != nil {
		if err := cmd.check(a, pos); err != nil {
			return err
		}
	}
	// The console's commands run on the connection of its own run.
	if !cmd.offline && a.client == nil {
		if err := a.connect(); err != nil {
			return err
		}
	}
	return cmd.run(a, pos)
}

// lookup finds the command args start with and how many words name it.
func lookup(args []string) (*command, int) {
	for _, c := range commands() {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			return c, len(words)
		}
	}
	return nil, 0
}

// subcommands lists the subcommands of a command group such as "sessions".
func subcommands(group string) []string {
	var out []string
	for _, c := range groupCommands(group) {
		_, sub, _ := strings.Cut(c.name, " ")
		out = append(out, sub)
	}
	return out
}

// groupCommands lists the commands of a group, in the order help shows
// them; none if group is no group.
func groupCommands(group string) []*command {
	var out []*command
	for _, c := range commands() {
		if g, _, ok := strings.Cut(c.name, " "); ok && g == group {
			out = append(out, c)
		}
	}
	return out
}

// groups lists the command groups: the first words of the commands named
// by two.
func groups() []string {
	var out []string
	for _, c := range commands() {
		if g, _, ok := strings.Cut(c.name, " "); ok && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// asksHelp reports whether args, up to "--", hold -h or --help.
func asksHelp(args []string) bool {
	for _, arg := range args {
		if arg == "--" {
			return false
		}
		if isFlag(arg) {
			if name, _, _ := splitFlag(arg); name == "h" || name == "help" {
				return true
			}
		}
	}
	return false
}

// connect dials NATS and opens the deployment.
func (a *app) connect() error {
	url, err := a.url()
	if err != nil {
		return err
	}
	var nc *nats.Conn
	if a.conn.URL == "" && a.conn.User == "" && a.conn.Creds == "" {
		// lash-node's embedded server on this machine: its nkey or its
		// password, whichever it takes (a server without authentication
		// ignores them; both files stay when a node changes mode).
		var tries []cli.Conn
		if seed := filepath.Join(a.data, "embedded-nkey.seed"); fileExists(seed) {
			c := a.conn
			c.Creds = seed
			tries = append(tries, c)
		}
		if b, err := os.ReadFile(filepath.Join(a.data, "embedded-password")); err == nil && len(bytes.TrimSpace(b)) > 0 {
			c := a.conn
			c.User, c.Password = "lash", string(bytes.TrimSpace(b))
			tries = append(tries, c)
		}
		for _, c := range append(tries, a.conn) {
			nc, err = c.Connect("lash-admin", url)
			if err == nil || !errors.Is(err, nats.ErrAuthorization) && !errors.Is(err, nats.ErrNkeysNotSupported) {
				break
			}
		}
	} else {
		nc, err = a.conn.Connect("lash-admin", url)
	}
	if err != nil {
		return err
	}
	a.nc = nc
	// Bind, not Open: an operator's command never creates a deployment,
	// not even one pointed at the wrong server or prefix.
	c, err := streams.Bind(a.ctx, nc, a.conn.Streams())
	if errors.Is(err, streams.ErrNoDeployment) {
		return fmt.Errorf("%w at %s (is a lash-node running there, with this --prefix?)", err, cli.Redact(url))
	}
	if err != nil {
		return err
	}
	if err := a.sign(c); err != nil {
		return err
	}
	a.client = c
	return nil
}

// sign gives c the deployment's secret (ADR 0036): from --secret-file, or,
// on lash-node's embedded server (no --nats), from the node's data
// directory. Then lash-admin's writes are signed and what it reads is
// checked. Without it, on a deployment that signs, lash-admin reads what
// is there unchecked and refuses to write durable truth, which every node
// would set aside.
func (a *app) sign(c *streams.Client) error {
	path := a.secret
	if path == "" && a.conn.URL == "" {
		for _, name := range []string{"secret", "event-secret"} {
			if p := filepath.Join(a.data, name); fileExists(p) {
				path = p
				break
			}
		}
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--secret-file: %w", err)
		}
		if err := c.Sign(a.ctx, bytes.TrimSpace(b)); err != nil {
			return fmt.Errorf("%w (the secret in %s)", err, path)
		}
		return nil
	}
	signed, err := c.Signed(a.ctx)
	if err != nil {
		return err
	}
	if signed {
		c.RefuseTruth(fmt.Errorf("%w: this deployment signs its records; give lash-admin the nodes' secret (--secret-file) to change them", streams.ErrSecretMismatch))
	}
	return nil
}

func (a *app) close() error {
	var err error
	if a.cache != nil {
		err = a.cache.close()
	}
	if a.nc != nil {
		a.nc.Close()
	}
	return err
}

// url is the NATS URL the command connects to: --nats, or else where
// lash-node's embedded server listens.
func (a *app) url() (string, error) {
	if a.conn.URL != "" {
		return a.conn.URL, nil
	}
	host, port, err := net.SplitHostPort(a.listen)
	switch {
	case err != nil:
		return "", a.usagef("--listen %q: want host:port", a.listen)
	case port == "0":
		return "", a.usagef("lash-node's --listen %s picks a free port: give --nats with the port it chose", a.listen)
	case host == "" || host == "0.0.0.0" || host == "::":
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, port), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
