package protocol

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
)

// NUL bytes. PostgreSQL stores no NUL in text or jsonb, SQLite does; one
// rule holds for both stores. What a job wrote (log lines, a result's
// summary) is always stored: each NUL becomes U+FFFD (StorableText). Any
// other text a client sends (run parameters, reasons, comments, runner
// names and labels) is refused with 400 naming the field (NULField).

// StorableText is s with each NUL replaced by U+FFFD.
func StorableText(s string) string {
	if !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// NULField returns the path (as FieldError names fields: "params/account",
// "labels/0") of the first key or string of a JSON document that holds a
// NUL, and whether there is one. The document is read as tokens, so that
// nothing is decoded twice into memory.
func NULField(doc []byte) (string, bool) {
	if !bytes.Contains(doc, []byte(`\u0000`)) {
		return "", false // JSON can carry a NUL only escaped
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	type frame struct {
		array bool
		key   string
		index int
		isKey bool // an object's next string token is a key
	}
	var stack []frame
	path := func(last string) string {
		var parts []string
		for _, f := range stack {
			if f.array {
				parts = append(parts, strconv.Itoa(f.index))
			} else if f.key != "" && !f.isKey {
				parts = append(parts, f.key)
			}
		}
		if last != "" {
			parts = append(parts, last)
		}
		return strings.Join(parts, "/")
	}
	// valueDone advances the enclosing container past one value.
	valueDone := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].index++
			} else {
				stack[n-1].isKey = true
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF || err != nil {
			return "", false
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				// The element opening is the value of its parent.
				stack = append(stack, frame{array: t == '[', isKey: t == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			n := len(stack)
			if n > 0 && !stack[n-1].array && stack[n-1].isKey {
				if strings.Contains(t, "\x00") {
					return path(t), true
				}
				stack[n-1].key = t
				stack[n-1].isKey = false
				continue
			}
			if strings.Contains(t, "\x00") {
				return path(""), true
			}
			valueDone()
		default:
			valueDone()
		}
	}
}
