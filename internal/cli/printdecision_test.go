package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPrintDecision: a denial's decision is told as its sentence and every
// rule considered; a decision of another shape is shown as it came.
func TestPrintDecision(t *testing.T) {
	t.Parallel()

	var d any
	require.NoError(t, json.Unmarshal([]byte(`{"allowed":false,"explanation":"no rule allows alice",
		"detail":{"allowed":false,"explanation":"no rule allows alice","rules":[
			{"id":"ops","file":"policies/a.yaml","line":3,"effect":"allow","matched":false,"reason":"alice is not in group ops"},
			{"id":"all","file":"policies/b.yaml","line":7,"effect":"deny","matched":true,"reason":""}],"unrelated_rules":2}}`), &d))
	var out bytes.Buffer
	printDecision(&out, d)
	require.Equal(t, "  why: no rule allows alice\n"+
		"  - allow rule ops (policies/a.yaml:3): no match: alice is not in group ops\n"+
		"  - deny rule all (policies/b.yaml:7): matched\n", out.String())

	out.Reset()
	printDecision(&out, map[string]any{"explanation": "denied", "detail": map[string]any{"rules": "not a list"}})
	require.Equal(t, "  decision: {\"detail\":{\"rules\":\"not a list\"},\"explanation\":\"denied\"}\n", out.String())

	out.Reset()
	printDecision(&out, map[string]any{"explanation": "denied at dispatch"})
	require.Equal(t, "  why: denied at dispatch\n", out.String())
}
