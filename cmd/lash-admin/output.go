package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/lash-run/lash/turn"
)

// emit prints v as one JSON document with --json; otherwise table writes
// the human form through a tabwriter (cells separated by tabs).
func (a *app) emit(v any, table func(w io.Writer)) error {
	if a.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// row writes one table row of cells.
func row(w io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = cell(fmt.Sprint(c))
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

// cell keeps a value on one line and in one column: newlines and tabs
// are written as escapes, other control characters dropped.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case unicode.IsControl(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// clip shortens s to n runes.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

// preview is the start of a payload, printable.
func preview(data []byte, n int) string {
	s := strings.ToValidUTF8(string(data), "\uFFFD")
	return clip(cell(s), n)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// ms is a duration in milliseconds, for JSON.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// utc is a time for JSON, in UTC.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// optTime is a time that may be unknown, for JSON: null then.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// usageJSON is token usage.
type usageJSON struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
	// Of the input, read from and written to the provider's prompt cache;
	// of the output, spent reasoning.
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
}

func usageOf(u turn.Usage) usageJSON {
	return usageJSON{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.Total(),
		CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens}
}

func fmtUsage(u turn.Usage) string {
	if u == (turn.Usage{}) {
		return "-"
	}
	return fmt.Sprintf("%d+%d", u.InputTokens, u.OutputTokens)
}

// terminationJSON says why a turn ended. Reason is empty while nothing
// ended.
type terminationJSON struct {
	Reason string `json:"reason"`
	Code   string `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func terminationOf(t turn.Termination) terminationJSON {
	if t.Reason == 0 {
		return terminationJSON{Code: t.Code, Detail: t.Detail}
	}
	return terminationJSON{Reason: t.Reason.String(), Code: t.Code, Detail: t.Detail}
}

func fmtTermination(t turn.Termination) string {
	if t.Reason == 0 {
		return "-"
	}
	return t.String()
}

// status names a run status; "none" before any turn was committed.
func status(s turn.RunStatus) string {
	if s == 0 {
		return "none"
	}
	return s.String()
}

// plural counts things: "1 turn", "2 turns".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
