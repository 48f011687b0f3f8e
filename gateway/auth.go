package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash/agents"
)

// Grant is what a bearer token lets its holder do, from the token's
// "lash" claim:
//
//	{"sessions": ["s1"], "session_prefix": "acme-u42-", "agents": ["support"], "decide": true}
//
// Sessions and SessionPrefix name the sessions the holder may read,
// stream, send to and list (ids made of [A-Za-z0-9_-]); Agents the agents
// it may start a session under ("*": any; none: the deployment's default
// agent only); Decide whether it may resume or cancel suspended calls.
type Grant struct {
	Sessions      []string `json:"sessions,omitempty"`
	SessionPrefix string   `json:"session_prefix,omitempty"`
	Agents        []string `json:"agents,omitempty"`
	Decide        bool     `json:"decide,omitempty"`
}

// MaxGrantSessions bounds the sessions a token names one by one.
const MaxGrantSessions = 256

// Sees says whether the grant covers session.
func (g *Grant) Sees(session string) bool {
	return g.SessionPrefix != "" && strings.HasPrefix(session, g.SessionPrefix) || slices.Contains(g.Sessions, session)
}

// MayUse says whether the grant lets its holder name agent ("" is the
// default agent, always allowed).
func (g *Grant) MayUse(agent string) bool {
	if agent == "" {
		return true
	}
	name, _, _ := strings.Cut(agent, "@")
	return slices.Contains(g.Agents, "*") || slices.Contains(g.Agents, name)
}

func (g *Grant) check() error {
	if len(g.Sessions) == 0 && g.SessionPrefix == "" {
		return errors.New("the token names no sessions and no session_prefix")
	}
	if len(g.Sessions) > MaxGrantSessions {
		return fmt.Errorf("the token names %d sessions, at most %d", len(g.Sessions), MaxGrantSessions)
	}
	if g.SessionPrefix != "" && !plainID(g.SessionPrefix) {
		return errors.New("session_prefix: only [A-Za-z0-9_-], at most 128 bytes")
	}
	for _, s := range g.Sessions {
		if !plainID(s) {
			return fmt.Errorf("session %.64q: only [A-Za-z0-9_-], at most 128 bytes", s)
		}
	}
	for _, a := range g.Agents {
		if a != "*" && agents.CheckName(a) != nil {
			return fmt.Errorf("agent %.64q: not an agent name", a)
		}
	}
	return nil
}

// MaxSessionID bounds the session ids the gateway serves.
const MaxSessionID = 128

// plainID: the ids the gateway serves are made of [A-Za-z0-9_-], so they
// are their own subject tokens and a prefix of one is a prefix of its key.
func plainID(s string) bool {
	if s == "" || len(s) > MaxSessionID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

type claims struct {
	jwt.RegisteredClaims
	Lash *Grant `json:"lash"`
}

// Caller is an authenticated request's holder.
type Caller struct {
	Grant
	// Subject is the token's sub claim, for logs; Key names the token for
	// its rate and stream limits (a hash: the token itself is kept
	// nowhere).
	Subject string
	Key     string
}

// AuthConfig says which tokens the gateway takes. Exactly one key source
// is set.
type AuthConfig struct {
	// HMACSecret verifies HS256/384/512 tokens (for tests and single-party
	// setups; at least 32 bytes).
	HMACSecret []byte
	// KeyFile is a PEM public key (RSA, ECDSA or Ed25519) or a JWK Set
	// (JSON) verifying tokens signed by their private keys.
	KeyFile string
	// JWKSURL is a JWK Set fetched over HTTP(S), refreshed hourly and when
	// a token names a key it does not hold (at most every five minutes).
	JWKSURL string
	// Audience the token's aud must include (default "lash"); Issuer, if
	// set, its iss.
	Audience string
	Issuer   string
	// Leeway allows clock skew in exp, nbf and iat (default 30s).
	Leeway time.Duration
}

// MaxTokenBytes bounds a bearer token.
const MaxTokenBytes = 8 << 10

// verifier checks bearer tokens.
type verifier struct {
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
}

func newVerifier(ctx context.Context, cfg AuthConfig) (*verifier, error) {
	set := 0
	for _, on := range []bool{len(cfg.HMACSecret) > 0, cfg.KeyFile != "", cfg.JWKSURL != ""} {
		if on {
			set++
		}
	}
	if set != 1 {
		return nil, errors.New("gateway: give exactly one of an HMAC secret, a key file or a JWKS URL")
	}
	if cfg.Audience == "" {
		cfg.Audience = "lash"
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	v := &verifier{}
	var methods []string
	switch {
	case len(cfg.HMACSecret) > 0:
		if len(cfg.HMACSecret) < 32 {
			return nil, errors.New("gateway: an HMAC secret of at least 32 bytes")
		}
		secret := bytes.Clone(cfg.HMACSecret)
		v.keyfunc = func(*jwt.Token) (any, error) { return secret, nil }
		methods = []string{"HS256", "HS384", "HS512"}
	case cfg.KeyFile != "":
		data, err := os.ReadFile(cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: key file: %w", err)
		}
		if v.keyfunc, err = fileKeys(data); err != nil {
			return nil, fmt.Errorf("gateway: key file %s: %w", cfg.KeyFile, err)
		}
		methods = publicMethods
	default:
		k, err := keyfunc.NewDefaultCtx(ctx, []string{cfg.JWKSURL})
		if err != nil {
			return nil, fmt.Errorf("gateway: JWKS %s: %w", cfg.JWKSURL, err)
		}
		v.keyfunc = k.Keyfunc
		methods = publicMethods
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(), jwt.WithLeeway(cfg.Leeway), jwt.WithIssuedAt()}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

var publicMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// fileKeys reads a key file: a JWK Set, or one PEM public key.
func fileKeys(data []byte) (jwt.Keyfunc, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		k, err := keyfunc.NewJWKSetJSON(json.RawMessage(t))
		if err != nil {
			return nil, err
		}
		return k.Keyfunc, nil
	}
	var key any
	var err error
	for _, parse := range []func([]byte) (any, error){
		func(b []byte) (any, error) { return jwt.ParseRSAPublicKeyFromPEM(b) },
		func(b []byte) (any, error) { return jwt.ParseECPublicKeyFromPEM(b) },
		func(b []byte) (any, error) { return jwt.ParseEdPublicKeyFromPEM(b) },
	} {
		if key, err = parse(data); err == nil {
			return func(*jwt.Token) (any, error) { return key, nil }, nil
		}
	}
	return nil, errors.New("neither a JWK Set nor a PEM public key (RSA, ECDSA, Ed25519)")
}

// errUnauthorized answers 401; its text never quotes the token.
type errUnauthorized struct{ reason string }

func (e *errUnauthorized) Error() string { return "unauthorized: " + e.reason }

// authenticate reads the request's bearer token.
func (v *verifier) authenticate(r *http.Request) (*Caller, error) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	switch {
	case h == "":
		return nil, &errUnauthorized{"no bearer token (Authorization: Bearer <token>)"}
	case !ok || !strings.EqualFold(scheme, "Bearer") || tok == "":
		return nil, &errUnauthorized{"the Authorization header is not a bearer token"}
	case len(tok) > MaxTokenBytes:
		return nil, &errUnauthorized{fmt.Sprintf("a token of %d bytes, at most %d", len(tok), MaxTokenBytes)}
	}
	var c claims
	if _, err := v.parser.ParseWithClaims(tok, &c, v.keyfunc); err != nil {
		return nil, &errUnauthorized{tokenError(err)}
	}
	if c.Lash == nil {
		return nil, &errUnauthorized{"the token has no lash claim"}
	}
	if err := c.Lash.check(); err != nil {
		return nil, &errUnauthorized{err.Error()}
	}
	sum := sha256.Sum256([]byte(tok))
	return &Caller{Grant: *c.Lash, Subject: c.Subject, Key: hex.EncodeToString(sum[:12])}, nil
}

// tokenError says why a token was refused, in words that quote nothing
// of it.
func tokenError(err error) string {
	for _, e := range []struct {
		err error
		say string
	}{
		{jwt.ErrTokenMalformed, "the token is malformed"},
		{jwt.ErrTokenUnverifiable, "the token cannot be verified (unknown key or algorithm)"},
		{jwt.ErrTokenSignatureInvalid, "the token's signature is invalid"},
		{jwt.ErrTokenExpired, "the token has expired"},
		{jwt.ErrTokenRequiredClaimMissing, "the token lacks a required claim (exp)"},
		{jwt.ErrTokenInvalidAudience, "the token is for another audience"},
		{jwt.ErrTokenInvalidIssuer, "the token is from another issuer"},
		{jwt.ErrTokenNotValidYet, "the token is not valid yet"},
		{jwt.ErrTokenUsedBeforeIssued, "the token was issued in the future"},
	} {
		if errors.Is(err, e.err) {
			return e.say
		}
	}
	return "the token is invalid"
}
