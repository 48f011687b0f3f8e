package provider

import (
	"cmp"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// RedactMark is what Redact puts in place of a secret.
const RedactMark = "[redacted]"

var (
	// authValue finds an Authorization header's value however a server
	// echoes it: a header line, a JSON or quoted field (also one escaped
	// inside a JSON string), or a Go-printed http.Header ([...]). Group 1 is the name and separator, group 2 the
	// value. An unquoted value runs to the end of the line, as in HTTP.
	authValue = regexp.MustCompile(`(?i)(\bauthorization(?:\\?["'])?\s*[:=]\s*)(\\".*?\\"|"(?:[^"\\]|\\.)*"|'[^']*'|\[[^\]]*\]|[^\r\n]*)`)
	// bearerToken finds a bearer token outside a header, in the token68
	// alphabet of RFC 6750; a redacted value ("[") does not match again.
	bearerToken = regexp.MustCompile(`(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*`)
)

// Redact returns s with every Authorization value and bearer token, and
// every occurrence of each non-empty secret (also in its URL- and
// JSON-escaped forms), replaced by RedactMark. Error text from a model server
// may echo the request's credentials; Redact is applied to it before it
// leaves a provider or reaches a journal. Without secrets, redacting
// redacted text changes nothing, so a provider and CallError may both
// apply it.
func Redact(s string, secrets ...string) string {
	for _, sec := range secretForms(secrets) {
		s = strings.ReplaceAll(s, sec, RedactMark)
	}
	s = authValue.ReplaceAllStringFunc(s, func(m string) string {
		sub := authValue.FindStringSubmatch(m)
		name, value := sub[1], sub[2]
		if value == "" {
			return m
		}
		// Keep the quotes, so the text around stays readable (and a JSON
		// body stays JSON).
		switch {
		case strings.HasPrefix(value, `\"`):
			return name + `\"` + RedactMark + `\"`
		case value[0] == '"' || value[0] == '\'':
			return name + value[:1] + RedactMark + value[:1]
		}
		return name + RedactMark
	})
	return bearerToken.ReplaceAllString(s, "${1} "+RedactMark)
}

// secretForms lists the texts to replace for secrets, longest first, so
// that a secret containing another is replaced whole.
func secretForms(secrets []string) []string {
	var forms []string
	for _, sec := range secrets {
		if sec == "" {
			continue
		}
		forms = append(forms, sec)
		if q := url.QueryEscape(sec); q != sec {
			forms = append(forms, q)
		}
		if b, err := json.Marshal(sec); err == nil {
			if j := string(b[1 : len(b)-1]); j != sec {
				forms = append(forms, j)
			}
		}
	}
	slices.SortStableFunc(forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return forms
}

// redactedCause shows its cause's text redacted and still unwraps to the
// cause, so errors.Is and errors.As see through it.
type redactedCause struct {
	err  error
	text string
}

func (e *redactedCause) Error() string { return e.text }
func (e *redactedCause) Unwrap() error { return e.err }

// Redacted returns a copy of e whose Code, Message and cause's text are
// passed through Redact with secrets. The copy unwraps to the same cause;
// only the text it shows differs. A nil e gives nil.
func (e *Error) Redacted(secrets ...string) *Error {
	if e == nil {
		return nil
	}
	r := *e
	r.Code = Redact(e.Code, secrets...)
	r.Message = Redact(e.Message, secrets...)
	if e.Err != nil {
		text := e.Err.Error()
		if red := Redact(text, secrets...); red != text {
			r.Err = &redactedCause{err: e.Err, text: red}
		}
	}
	return &r
}
