package openapi

import (
	_ "embed"
	"fmt"
	"net/http"
	"sync"

	"github.com/goccy/go-yaml"
)

// Path is where the server serves the document.
const Path = "/v1/openapi.json"

//go:embed openapi.yaml
var source []byte

// YAML is the document as written.
func YAML() []byte { return source }

// JSON is the document as JSON, converted once. The source is YAML so that
// it can carry comments and anchors; clients and generators get JSON.
var JSON = sync.OnceValue(func() []byte {
	b, err := toJSON(source)
	if err != nil {
		// The embedded file is checked by this package's tests; a build
		// whose document does not convert is broken, not degraded.
		panic(err)
	}
	return b
})

func toJSON(src []byte) ([]byte, error) {
	b, err := yaml.YAMLToJSON(src)
	if err != nil {
		return nil, fmt.Errorf("convert openapi.yaml to JSON: %w", err)
	}
	return b, nil
}

// ServeHTTP answers GET /v1/openapi.json. The document names no secret, so
// it needs no token, like /healthz.
func ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(JSON())
}
