package web

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestPrettyBounded: 5,000 nested objects (a 30 KB request) render as a
// page-sized text that says it was truncated, not as tens of megabytes of
// indentation; an ordinary value renders as json.MarshalIndent would.
func TestPrettyBounded(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	out := pretty(json.RawMessage(deep))
	require.Less(t, len(out), 2*prettyMaxBytes, "rendered %d bytes", len(out))
	require.Contains(t, out, `"a": {`)

	wide := `{"k":[` + strings.Repeat(`"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxé",`, 20000) + `1]}`
	out = pretty(json.RawMessage(wide))
	require.Less(t, len(out), 2*prettyMaxBytes)
	require.True(t, strings.HasSuffix(out, prettyTruncated))
	require.True(t, utf8.ValidString(out), "cut on a character boundary")

	plain := `{"b":[1,2.50,{"c":"<x>"}],"a":{},"n":123456789012345678901234567890,"e":[]}`
	var v any
	require.NoError(t, json.Unmarshal([]byte(plain), &v))
	want, _ := json.MarshalIndent(v, "", "  ")
	got := pretty(json.RawMessage(plain))
	require.Equal(t, strings.ReplaceAll(string(want), "1.2345678901234568e+29", "123456789012345678901234567890"), strings.ReplaceAll(got, "2.50", "2.5"))
}
