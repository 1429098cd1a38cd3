package web

import (
	"bytes"
	"html"
	"html/template"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// md renders runbooks. goldmark's default drops raw HTML ("raw HTML
// omitted"); it is never switched to unsafe.
var md = goldmark.New()

// renderMarkdown renders a runbook to HTML that can carry no script: raw
// HTML is dropped by the renderer, and every link and image destination
// that is not http(s), mailto or a relative reference is replaced before
// rendering, whatever the renderer's own URL checks do.
func renderMarkdown(src string) template.HTML {
	if src == "" {
		return ""
	}
	source := []byte(src)
	doc := md.Parser().Parse(text.NewReader(source))
	var unsafeAuto []*ast.AutoLink
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch l := n.(type) {
		case *ast.Link:
			if !safeDestination(l.Destination) {
				l.Destination = []byte("#unsafe-link-removed")
			}
		case *ast.Image:
			if !safeDestination(l.Destination) {
				l.Destination = []byte("#unsafe-link-removed")
			}
		case *ast.AutoLink:
			if !safeDestination(l.URL(source)) {
				unsafeAuto = append(unsafeAuto, l)
			}
		}
		return ast.WalkContinue, nil
	})
	// An unsafe autolink becomes its text (replaced after the walk, which
	// must not see the tree change under it).
	for _, l := range unsafeAuto {
		l.Parent().ReplaceChild(l.Parent(), l, ast.NewString(l.URL(source)))
	}
	var buf bytes.Buffer
	if err := md.Renderer().Render(&buf, source, doc); err != nil {
		return template.HTML(template.HTMLEscapeString(src))
	}
	// The renderer escapes text and attributes and omits raw HTML; the
	// links were checked above.
	return template.HTML(buf.String()) //nolint:gosec // sanitized as described
}

// safeDestination checks a destination as written and with its character
// references resolved, as the renderer will resolve them.
func safeDestination(d []byte) bool {
	return safeURL(string(d)) && safeURL(html.UnescapeString(string(d)))
}

// safeURL allows http, https and mailto URLs and references without a
// scheme. Any colon before the first "/", "?" or "#" is read as ending a
// scheme, so "java\tscript:" or "\x01javascript:" (which browsers clean up
// into javascript:) are refused too.
func safeURL(raw string) bool {
	s := strings.TrimSpace(raw)
	if i := strings.IndexAny(s, ":/?#"); i >= 0 && s[i] == ':' {
		switch strings.ToLower(s[:i]) {
		case "http", "https", "mailto":
			return true
		}
		return false
	}
	return true
}
