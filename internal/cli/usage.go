package cli

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// Section is a titled group of settings in a command's help.
type Section struct {
	Title string
	Names []string
}

// Usage writes fs's settings grouped by sections: each with the value it
// takes, its environment names and its default, then what it does. A flag
// no section names is listed under "Other settings", so the help never
// leaves one out.
func Usage(w io.Writer, fs *flag.FlagSet, envPrefix string, aliases map[string][]string, sections []Section) {
	listed := map[string]bool{}
	for _, sec := range sections {
		fmt.Fprintf(w, "%s:\n", sec.Title)
		for _, name := range sec.Names {
			if f := fs.Lookup(name); f != nil {
				writeFlag(w, f, envPrefix, aliases[name])
				listed[name] = true
			}
		}
		fmt.Fprintln(w)
	}
	var rest []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f)
		}
	})
	if len(rest) > 0 {
		fmt.Fprintln(w, "Other settings:")
		for _, f := range rest {
			writeFlag(w, f, envPrefix, aliases[f.Name])
		}
		fmt.Fprintln(w)
	}
}

func writeFlag(w io.Writer, f *flag.Flag, envPrefix string, aliases []string) {
	kind, help := flag.UnquoteUsage(f)
	head := "  --" + f.Name
	if kind != "" {
		head += " " + kind
	}
	env := append([]string{EnvName(envPrefix, f.Name)}, aliases...)
	notes := "env " + strings.Join(env, " or ")
	if def := f.DefValue; def != "" && !isZeroFlag(f) {
		if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
			def = strconv.Quote(def)
		}
		notes += "; default " + def
	}
	fmt.Fprintf(w, "%s  (%s)\n", head, notes)
	for _, line := range Wrap(help, 72) {
		fmt.Fprintf(w, "      %s\n", line)
	}
}

// isZeroFlag reports whether f's default is its type's zero value, which
// the help does not show (as flag.PrintDefaults does not).
func isZeroFlag(f *flag.Flag) bool {
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	v, ok := z.Interface().(flag.Value)
	return ok && f.DefValue == v.String()
}

// Wrap breaks text into lines of at most width characters at spaces.
func Wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
