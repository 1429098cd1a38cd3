package openapi_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	pyaml "go.yaml.in/yaml/v3"

	"github.com/jobplane/jobplane/internal/openapi"
)

// The JSON served is the YAML document, value for value: the conversion
// loses no key, anchor or type (an independent YAML parser reads the
// source).
func TestJSONIsTheYAMLDocument(t *testing.T) {
	t.Parallel()
	var fromYAML any
	require.NoError(t, pyaml.Unmarshal(openapi.YAML(), &fromYAML))
	want, err := json.Marshal(fromYAML)
	require.NoError(t, err)
	var got, wantV any
	require.NoError(t, json.Unmarshal(openapi.JSON(), &got))
	require.NoError(t, json.Unmarshal(want, &wantV))
	require.Equal(t, wantV, got)
	doc := got.(map[string]any)
	require.Equal(t, "3.1.0", doc["openapi"])
}

func TestServeHTTP(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	openapi.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, openapi.Path, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, string(openapi.JSON()), rec.Body.String())
}

// TestProblemCodesAreTheProtocols holds the document's ProblemCode enum to
// the refusal codes the server can answer with, both ways: every Code*
// string constant of internal/protocol (read from its source, since this
// package imports nothing internal) is in the enum, and the enum names no
// code the server does not have. A refusal added without its code in the
// contract fails here, before any test happens to provoke it.
func TestProblemCodesAreTheProtocols(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "protocol", "*.go"))
	require.NoError(t, err)
	var codes []string
	for _, f := range files {
		// codes_web.go holds the web UI's own refusals (a forged form),
		// which no API route answers with.
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "codes_web.go" {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					codes = append(codes, s)
				}
			}
		}
	}
	slices.Sort(codes)
	codes = slices.Compact(codes)
	require.Greater(t, len(codes), 40, "the protocol's codes were not found")

	var doc struct {
		Components struct {
			Schemas struct {
				ProblemCode struct {
					Enum []string `json:"enum"`
				} `json:"ProblemCode"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(openapi.JSON(), &doc))
	enum := slices.Sorted(slices.Values(doc.Components.Schemas.ProblemCode.Enum))
	require.Equal(t, codes, enum, "components.schemas.ProblemCode.enum must list exactly the Code* constants of internal/protocol")
}
