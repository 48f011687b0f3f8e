package gateway

import (
	_ "embed"
	"net/http"
)

// openAPI documents the API (OpenAPI 3.1), served at /v1/openapi.json.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
