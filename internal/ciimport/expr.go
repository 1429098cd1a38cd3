package ciimport

import (
	"strconv"
	"strings"

	"github.com/rhysd/actionlint"
)

// exprSpan is one ${{ }} of a string.
type exprSpan struct {
	start, end int // offsets of "${{" and just past "}}"
	text       string
	node       actionlint.ExprNode
}

// exprErr is a ${{ }} that does not parse, at an offset of its string.
type exprErr struct {
	offset int
	msg    string
}

// findExprs returns the ${{ }} of s in order. Scanning stops at the first
// one that does not parse, as GitHub's own evaluation would.
func findExprs(s string) ([]exprSpan, *exprErr) {
	var out []exprSpan
	base := 0
	for {
		i := strings.Index(s[base:], "${{")
		if i < 0 {
			return out, nil
		}
		start := base + i
		body := s[start+3:]
		l := actionlint.NewExprLexer(body)
		node, err := parseExpr(l)
		if err != nil {
			return out, &exprErr{offset: start + 3 + max(err.Offset, 0), msg: "expression: " + err.Message}
		}
		end := start + 3 + l.Offset()
		if end > len(s) || end <= start+3 {
			return out, &exprErr{offset: start, msg: "expression: unterminated ${{"}
		}
		out = append(out, exprSpan{start: start, end: end, text: strings.TrimSpace(s[start+3 : end-2]), node: node})
		base = end
	}
}

// parseExpr parses one expression, turning a panic of the expression parser
// into an error: the input is hostile, and one bad string must not stop the
// inventory.
func parseExpr(l *actionlint.ExprLexer) (n actionlint.ExprNode, err *actionlint.ExprError) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, &actionlint.ExprError{Message: "cannot parse expression"}
		}
	}()
	return actionlint.NewExprParser().Parse(l)
}

// exprPath returns the property path of a plain reference such as
// secrets.DB_URL, inputs['target'] or github.event.inputs.version, and nil
// for anything else (a function call, an operator, a literal).
func exprPath(n actionlint.ExprNode) []string {
	switch v := n.(type) {
	case *actionlint.VariableNode:
		return []string{v.Name}
	case *actionlint.ObjectDerefNode:
		p := exprPath(v.Receiver)
		if p == nil {
			return nil
		}
		return append(p, v.Property)
	case *actionlint.IndexAccessNode:
		p := exprPath(v.Operand)
		s, ok := v.Index.(*actionlint.StringNode)
		if p == nil || !ok {
			return nil
		}
		return append(p, s.Value)
	}
	return nil
}

// origCase returns name as spelled in text: actionlint's parser lower-cases
// property names (contexts are case-insensitive), but a secret or an input
// is shown and written as the workflow spells it.
func origCase(text, name string) string {
	if i := strings.Index(strings.ToLower(text), strings.ToLower(name)); i >= 0 && len(text) >= i+len(name) {
		return text[i : i+len(name)]
	}
	return name
}

// spelled restores the spelling of a path's last element from the text of
// its expression.
func spelled(text string, p []string) []string {
	if len(p) == 0 {
		return p
	}
	out := lower(p)
	out[len(out)-1] = origCase(text, out[len(out)-1])
	return out
}

// exprRefs returns every property path an expression reads, plain or not:
// `secrets.A || secrets.B` reads both.
func exprRefs(n actionlint.ExprNode) [][]string {
	var out [][]string
	actionlint.VisitExprNode(n, func(node, parent actionlint.ExprNode, entering bool) {
		if !entering {
			return
		}
		// Report the longest path only: the receiver of a dereference is
		// visited too.
		switch parent.(type) {
		case *actionlint.ObjectDerefNode:
			return
		case *actionlint.IndexAccessNode:
			if parent.(*actionlint.IndexAccessNode).Operand == node {
				return
			}
		}
		if p := exprPath(node); p != nil {
			out = append(out, lower(p))
		}
	})
	return out
}

// lower lower-cases the context names of a path (contexts are case
// insensitive; secret and input names keep their spelling for display).
func lower(p []string) []string {
	out := make([]string, len(p))
	copy(out, p)
	out[0] = strings.ToLower(out[0])
	return out
}

// refKind classifies a path: ("secret", NAME), ("var", NAME),
// ("input", NAME), ("env", NAME) or ("", "").
func refKind(p []string) (kind, name string) {
	switch {
	case len(p) == 2 && p[0] == "secrets":
		return "secret", p[1]
	case len(p) == 2 && p[0] == "vars":
		return "var", p[1]
	case len(p) == 2 && p[0] == "inputs":
		return "input", p[1]
	case len(p) == 4 && p[0] == "github" && strings.EqualFold(p[1], "event") && strings.EqualFold(p[2], "inputs"):
		return "input", p[3]
	case len(p) == 2 && p[0] == "env":
		return "env", p[1]
	}
	return "", ""
}

// shellWord renders parts as one shell word: literal text single-quoted,
// substitutions ("${NAME}") double-quoted, so that nothing the CI file said
// literally is expanded by the shell.
func shellWord(parts []wordPart) string {
	var b strings.Builder
	for _, p := range parts {
		if p.literal {
			if p.text == "" {
				continue
			}
			b.WriteString("'" + strings.ReplaceAll(p.text, "'", `'\''`) + "'")
		} else {
			b.WriteString(`"` + p.text + `"`)
		}
	}
	if b.Len() == 0 {
		return "''"
	}
	return b.String()
}

type wordPart struct {
	text    string
	literal bool
}

// quoteYAML renders s as a YAML double-quoted scalar. strconv.Quote's
// escapes (\", \\, \n, \t, \xNN, \uNNNN) are all valid YAML, except \x
// which YAML spells the same way; non-printable characters are escaped.
func quoteYAML(s string) string {
	return strconv.Quote(s)
}
