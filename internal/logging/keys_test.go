package logging_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// identifierKeys are keys a log pipeline would index under another name:
// the identifiers are run_id, attempt_id and runner_id on every line.
var identifierKeys = map[string]string{
	"run": "run_id", "runid": "run_id", "runID": "run_id",
	"attempt": "attempt_id", "attemptid": "attempt_id", "attemptID": "attempt_id",
	"runner": "runner_id", "runnerid": "runner_id", "runnerID": "runner_id",
}

// logMethods are slog's methods whose arguments after the message (or
// from the first, for With) are key-value pairs, with the index of the
// first key.
var logMethods = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"With": 0,
}

// TestIdentifierKeys reads every non-test Go file of the module's internal
// packages and refuses a log call that names a run, an attempt or a runner
// under any key but run_id, attempt_id and runner_id: a line keyed
// "runner" is missed by a pipeline that indexes runner_id.
func TestIdentifierKeys(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files := 0
	var bad []string
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			first, ok := logMethods[sel.Sel.Name]
			if !ok || len(call.Args) <= first {
				return true
			}
			// A message argument that is not a string literal is no slog
			// call (a With of another type, an Error method).
			if first > 0 {
				if lit, ok := call.Args[first-1].(*ast.BasicLit); !ok || lit.Kind != token.STRING {
					return true
				}
			}
			for i := first; i < len(call.Args); i += 2 {
				lit, ok := call.Args[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					// An slog.Attr or a computed key: the pairs are not
					// read further.
					break
				}
				key, _ := strconv.Unquote(lit.Value)
				if want, ok := identifierKeys[key]; ok {
					bad = append(bad, fset.Position(lit.Pos()).String()+": key "+strconv.Quote(key)+", want "+want)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the internal packages were not found")
	require.Empty(t, bad, "log calls naming identifiers under other keys")
}
