package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/lash-run/lash/gateway"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
)

// apiSettings configure the client API (package gateway), off unless
// --api gives an address.
type apiSettings struct {
	addr            string
	hmacFile        string
	keyFile         string
	jwksURL         string
	audience        string
	issuer          string
	origins         string
	rate            float64
	streamsPerToken int
	maxStreams      int
}

var apiFlags = []string{"api", "api-hmac-secret-file", "api-key-file", "api-jwks-url", "api-audience", "api-issuer",
	"api-origins", "api-rate", "api-streams-per-token", "api-max-streams"}

func (a *apiSettings) register(fs *flag.FlagSet) {
	fs.StringVar(&a.addr, "api", "off", "`address` serving the client API over HTTP (sessions, messages, decisions, stops, event streams in lash's, the AI SDK's and AG-UI's protocols); off: none")
	fs.StringVar(&a.hmacFile, "api-hmac-secret-file", "", "`file` holding the HMAC secret (at least 32 bytes) that signs the API's bearer tokens (HS256): for tests and single-party setups")
	fs.StringVar(&a.keyFile, "api-key-file", "", "`file` holding the public key (PEM: RSA, ECDSA, Ed25519) or JWK Set that verifies the API's bearer tokens")
	fs.StringVar(&a.jwksURL, "api-jwks-url", "", "JWK Set `URL` verifying the API's bearer tokens, fetched hourly and for a key it lacks")
	fs.StringVar(&a.audience, "api-audience", "lash", "the `aud` the API's tokens must name")
	fs.StringVar(&a.issuer, "api-issuer", "", "the `iss` the API's tokens must name (empty: any)")
	fs.StringVar(&a.origins, "api-origins", "", "browser `origins` granted CORS (comma-separated, * for any; empty: none)")
	fs.Float64Var(&a.rate, "api-rate", 20, "`requests` a second each token may make (twice as many in a burst); past it 429")
	fs.IntVar(&a.streamsPerToken, "api-streams-per-token", 8, "event `streams` each token may hold open; past it 429")
	fs.IntVar(&a.maxStreams, "api-max-streams", 10000, "event `streams` the node's API holds open in all; past it 503")
}

func (a *apiSettings) check(usage func(string, ...any) error) error {
	if a.addr == "off" {
		return nil
	}
	if _, _, err := net.SplitHostPort(a.addr); err != nil {
		return usage("--api %q: want host:port or off", a.addr)
	}
	n := 0
	for _, s := range []string{a.hmacFile, a.keyFile, a.jwksURL} {
		if s != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return usage("--api needs exactly one of --api-hmac-secret-file, --api-key-file, --api-jwks-url")
	case a.rate <= 0:
		return usage("--api-rate must be above 0")
	case a.streamsPerToken < 1 || a.maxStreams < 1:
		return usage("--api-streams-per-token and --api-max-streams must be at least 1")
	}
	return nil
}

func (a *apiSettings) config(log *slog.Logger) (gateway.Config, error) {
	cfg := gateway.Config{Auth: gateway.AuthConfig{KeyFile: a.keyFile, JWKSURL: a.jwksURL, Audience: a.audience, Issuer: a.issuer},
		Rate: a.rate, Burst: int(2 * a.rate), StreamsPerToken: a.streamsPerToken, MaxStreams: a.maxStreams, Logger: log}
	if a.hmacFile != "" {
		b, err := os.ReadFile(a.hmacFile)
		if err != nil {
			return cfg, fmt.Errorf("--api-hmac-secret-file: %w", err)
		}
		cfg.Auth.HMACSecret = []byte(strings.TrimSpace(string(b)))
	}
	for _, o := range strings.Split(a.origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.Origins = append(cfg.Origins, o)
		}
	}
	cfg.Burst = max(cfg.Burst, 1)
	return cfg, nil
}

// clientAPI is the client API while it serves.
type clientAPI struct {
	g   *gateway.Gateway
	srv *http.Server
}

// serveAPI starts the client API.
func serveAPI(a *apiSettings, c *streams.Client, local *nodeapi.Server, log *slog.Logger) (*clientAPI, net.Addr, error) {
	cfg, err := a.config(log)
	if err != nil {
		return nil, nil, err
	}
	cfg.Local = local
	g, err := gateway.New(c, cfg)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		g.Close()
		return nil, nil, fmt.Errorf("--api: %w", err)
	}
	srv := &http.Server{Handler: g.Handler(), MaxHeaderBytes: gateway.MaxHeaderBytes, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("client API stopped", "err", err)
		}
	}()
	return &clientAPI{g: g, srv: srv}, ln.Addr(), nil
}

// drain tells every open stream to reconnect (to another node's API) and
// waits, at most until ctx ends, for the requests in flight.
func (api *clientAPI) drain(ctx context.Context) {
	api.g.Close()
	if err := api.srv.Shutdown(ctx); err != nil {
		_ = api.srv.Close()
	}
}
