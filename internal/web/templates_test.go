package web

import (
	"io/fs"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The content security policy forbids inline script and style; a template
// that used them would break silently in the browser, so none may.
func TestTemplatesHaveNoInlineScriptOrStyle(t *testing.T) {
	t.Parallel()
	bad := regexp.MustCompile(`(?i)<script(\s[^>]*)?>[^<]|<script(?:\s(?:[^s>]|s[^r]|sr[^c])*)?>|\sstyle=|\son[a-z]+=|<style|javascript:`)
	names, err := fs.Glob(templateFS, "templates/*.html")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, n := range names {
		b, err := fs.ReadFile(templateFS, n)
		require.NoError(t, err)
		require.Empty(t, bad.FindAllString(string(b), -1), n)
	}
	for _, n := range pageNames {
		require.Contains(t, names, "templates/"+n+".html")
	}
}
