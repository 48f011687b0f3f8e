package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const clientsScript = `
rule approve
  when user contains deploy
  when tools = 0
  call wait_for_approval {"request":"deploy to production"}

rule deployed
  when user contains deploy
  say Deployed.

rule weather
  when user contains weather
  when tools = 0
  call get_weather {"city":"Oslo"}

rule weather-answer
  when user contains weather
  pace 5ms
  say It is cold in Oslo, as usual in winter.

default
  say Hello.
`

// The client API driven by clients no one here wrote, installed from npm
// at the versions e2e/clients/package-lock.json pins: the AI SDK's chat
// transport and AG-UI's HttpAgent, against a lash-node serving --api. It
// needs node and npm (and npm's registry, once); LASH_REQUIRE_NODE=1 (set
// by .ci/run) fails instead of skipping without them.
func TestClientsFromNPM(t *testing.T) {
	node, dir := npmProject(t, "clients", "aisdk.mjs", "agui.mjs")
	d := newDeployment(t)
	serveWeather(t, d.url)
	secret := "a secret of at least thirty-two bytes, for tests"
	port := freePort(t)
	d.startNode("node-a", "--script", d.file("clients.script", clientsScript), "--model", "scripted",
		"--api", "127.0.0.1:"+port, "--api-hmac-secret-file", d.file("api-secret", secret))
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "e2e", "aud": "lash",
		"exp": time.Now().Add(time.Hour).Unix(), "lash": map[string]any{"session_prefix": "web-", "decide": true}}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{"aisdk.mjs", "agui.mjs"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, node, script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LASH_API=http://127.0.0.1:"+port, "LASH_TOKEN="+tok)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), ": ok") {
			t.Errorf("%s: %v\n%s", script, err, out)
		}
	}
}

// serveWeather serves get_weather over NATS.
func serveWeather(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("weather"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := natstool.Serve(nc, "lash", micro.Config{Name: "get_weather", Version: "1.0.0"}, natstool.Served{
		Name: "get_weather", Description: "the weather in a city",
		Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`),
		Handle: func(_ context.Context, req natstool.Request) (string, error) {
			var args struct {
				City string `json:"city"`
			}
			if err := json.Unmarshal(req.Args, &args); err != nil {
				return "", err
			}
			return "-3C in " + args.City, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
}
