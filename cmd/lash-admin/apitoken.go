package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash/gateway"
)

// tokenFlags are the api-token command's flags.
type tokenFlags struct {
	secretFile, sessions, prefix, agents, subject, audience, issuer string
	decide                                                          bool
	ttl                                                             time.Duration
}

var apiTokenCmd = &command{
	name:    "api-token",
	summary: "a bearer token for the client API, signed with its HMAC secret",
	doc: `Prints a JWT (HS256) for lash-node --api when it verifies tokens with an HMAC
secret (--api-hmac-secret-file): its "lash" claim grants the sessions named by
--sessions and those whose ids start with --prefix, the agents --agents names (*
for any), and decisions with --decide. For tests and single-party setups: with
--api-key-file or --api-jwks-url, your identity provider signs the tokens.`,
	flags: func(a *app, fs *flag.FlagSet) {
		t := &a.token
		fs.StringVar(&t.secretFile, "secret-file", "", "`file` holding the API's HMAC secret (lash-node --api-hmac-secret-file)")
		fs.StringVar(&t.sessions, "sessions", "", "comma-separated session `ids` the token grants")
		fs.StringVar(&t.prefix, "prefix", "", "session id `prefix` the token grants")
		fs.StringVar(&t.agents, "agents", "", "comma-separated agent `names` the token may name (* for any)")
		fs.BoolVar(&t.decide, "decide", false, "grant decisions for suspended calls")
		fs.StringVar(&t.subject, "subject", "lash-admin", "the token's `sub`")
		fs.StringVar(&t.audience, "audience", "lash", "the token's `aud` (lash-node --api-audience)")
		fs.StringVar(&t.issuer, "issuer", "", "the token's `iss` (lash-node --api-issuer)")
		fs.DurationVar(&t.ttl, "ttl", time.Hour, "how long the token holds")
	},
	check: func(a *app, _ []string) error {
		t := a.token
		switch {
		case t.secretFile == "":
			return a.usagef("--secret-file is required")
		case t.sessions == "" && t.prefix == "":
			return a.usagef("grant sessions: --sessions, --prefix or both")
		case t.ttl <= 0:
			return a.usagef("--ttl must be above 0")
		}
		return nil
	},
	offline: true,
	run:     runAPIToken,
}

func runAPIToken(a *app, _ []string) error {
	t := a.token
	b, err := os.ReadFile(t.secretFile)
	if err != nil {
		return err
	}
	secret := strings.TrimSpace(string(b))
	if len(secret) < 32 {
		return fmt.Errorf("%s: the secret is %d bytes, at least 32", t.secretFile, len(secret))
	}
	g := gateway.Grant{Sessions: splitList(t.sessions), SessionPrefix: t.prefix, Agents: splitList(t.agents), Decide: t.decide}
	now := time.Now()
	claims := jwt.MapClaims{"sub": t.subject, "aud": t.audience, "iat": now.Unix(), "exp": now.Add(t.ttl).Unix(), "lash": g}
	if t.issuer != "" {
		claims["iss"] = t.issuer
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.stdout, s)
	return err
}
