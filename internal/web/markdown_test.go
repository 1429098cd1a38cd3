package web

import (
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRenderMarkdownNeutralisesLinksAndHTML(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ in, want, not string }{
		"heading and emphasis": {"# Title\n\nrun **it**", "<strong>it</strong>", "<script"},
		"raw html block":       {"<script>alert(1)</script>\n", "raw HTML omitted", "<script"},
		"raw inline html":      {"a <img src=x onerror=alert(1)> b", "raw HTML omitted", "<img"},
		"javascript link":      {"[x](javascript:alert(1))", `href="#unsafe-link-removed"`, "javascript:alert"},
		"mixed case scheme":    {"[x](JaVaScRiPt:alert(1))", `href="#unsafe-link-removed"`, "JaVaScRiPt:"},
		"vbscript link":        {"[x](vbscript:msgbox)", `href="#unsafe-link-removed"`, "vbscript:"},
		"data image":           {"![x](data:image/png;base64,AAAA)", `src="#unsafe-link-removed"`, "data:"},
		"reference link":       {"[x][r]\n\n[r]: javascript:alert(1)\n", `href="#unsafe-link-removed"`, `href="javascript`},
		"autolink":             {"<javascript:alert(3)>", "javascript:alert(3)", "<a "},
		"safe links stay":      {"[a](https://example.com/x?y=1) [b](/runs) [c](mailto:ops@example.com)", `href="https://example.com/x?y=1"`, "unsafe-link-removed"},
	}
	for name, c := range cases {
		out := string(renderMarkdown(c.in))
		require.Contains(t, out, c.want, name)
		require.NotContains(t, out, c.not, name)
	}
	require.Empty(t, string(renderMarkdown("")))
}

var attrRE = regexp.MustCompile(`(?i)\s(href|src)="([^"]*)"`)

// FuzzRenderMarkdown: whatever the runbook says, the HTML has no script,
// no raw tags that could carry handlers, and only safe link targets.
func FuzzRenderMarkdown(f *testing.F) {
	for _, s := range []string{"# t\n[a](javascript:x)", "<script>x</script>", "![i](data:text/html,x)", "<a href=javascript:x>y</a>",
		"[a](java\tscript:x)", "[a](<javascript:x>)", "<JAVASCRIPT:x>", "[a](&#106;avascript:x)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out := string(renderMarkdown(src))
		lower := strings.ToLower(out)
		for _, bad := range []string{"<script", "<iframe", "<object", "<embed", "<svg", "<style", " onerror=", " onclick=", " onload="} {
			if strings.Contains(lower, bad) {
				t.Fatalf("rendered %q contains %q: %s", src, bad, out)
			}
		}
		for _, m := range attrRE.FindAllStringSubmatch(out, -1) {
			if u := html.UnescapeString(m[2]); !safeURL(u) {
				t.Fatalf("rendered %q has %s=%q", src, m[1], u)
			}
		}
	})
}
