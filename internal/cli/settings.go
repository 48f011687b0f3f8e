// Package cli holds what lash-node and lash-admin share: settings read
// from flags, the environment and a file, and the NATS connection and turn
// machine settings both commands must agree on.
package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// ErrUsage marks an invalid setting: the commands print it on one line and
// exit with status 2.
var ErrUsage = errors.New("invalid setting")

// Parse sets fs's flags from, in rising precedence, the file named by the
// --config flag (or <envPrefix>CONFIG), the environment (<envPrefix> plus
// the flag's name upper-cased, '-' as '_') and args. fs must define a
// "config" string flag. Extra names env also reads for a flag (NATS_URL for
// "nats", say) are given in aliases. It returns the remaining arguments.
//
// Parse prints nothing: its errors wrap ErrUsage (and flag.ErrHelp for
// --help), and printing them, or the usage, is the command's job.
func Parse(fs *flag.FlagSet, args []string, envPrefix string, aliases map[string][]string) ([]string, error) {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err != nil {
		// flag.ErrHelp stays visible to errors.Is: --help is no mistake.
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	fromEnv := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		names := append([]string{EnvName(envPrefix, f.Name)}, aliases[f.Name]...)
		for _, n := range names {
			if v, ok := os.LookupEnv(n); ok && v != "" {
				fromEnv[f.Name] = v
				return
			}
		}
	})
	cfgFlag := fs.Lookup("config")
	if cfgFlag == nil {
		return nil, errors.New("cli: the flag set has no config flag")
	}
	path := cfgFlag.Value.String()
	if !set["config"] && fromEnv["config"] != "" {
		path = fromEnv["config"]
	}
	if path != "" {
		fromFile, err := ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, name := range sortedKeys(fromFile) {
			if fs.Lookup(name) == nil {
				return nil, fmt.Errorf("%w: %s: unknown setting %q", ErrUsage, path, name)
			}
			if set[name] || fromEnv[name] != "" {
				continue
			}
			if err := fs.Set(name, fromFile[name]); err != nil {
				return nil, fmt.Errorf("%w: %s: %s: %v", ErrUsage, path, name, err)
			}
		}
	}
	for _, name := range sortedKeys(fromEnv) {
		if set[name] || name == "config" {
			continue
		}
		if err := fs.Set(name, fromEnv[name]); err != nil {
			return nil, fmt.Errorf("%w: %s=%q: %v", ErrUsage, EnvName(envPrefix, name), fromEnv[name], err)
		}
	}
	return fs.Args(), nil
}

// EnvName is the environment variable for a flag.
func EnvName(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ReadFile reads a settings file: one "name = value" per line, names as
// the flags are spelled, '#' starting a comment line. Values may be quoted
// with double quotes.
func ReadFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: config file: %v", ErrUsage, err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: %s:%d: want name = value", ErrUsage, path, n)
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w: %s:%d: %s set twice", ErrUsage, path, n, name)
		}
		out[name] = value
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUsage, path, err)
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
