package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jobplane/jobplane/internal/store"
)

// Genesis is the previous hash of the first link.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// domain separates this hash from any other SHA-256 use; the version moves
// if the encoding ever changes.
const domain = "jobplane-audit-v1\n"

// Encode returns the canonical encoding of an event: a JSON object with the
// keys seq, tenant, at_us, actor, action, subject, details in this order, no
// insignificant whitespace, at_us the event time in microseconds since the
// Unix epoch (the precision both stores keep), and details in canonical
// form (see canonicalJSON). The encoding depends only on the stored values,
// not on how a backend prints them (PostgreSQL's jsonb adds spaces and
// reorders keys).
func Encode(e *store.AuditEvent) []byte {
	var b bytes.Buffer
	b.Grow(128 + len(e.Tenant) + len(e.Actor) + len(e.Action) + len(e.Subject) + len(e.Details))
	b.WriteString(`{"seq":`)
	b.WriteString(strconv.FormatInt(e.Seq, 10))
	b.WriteString(`,"tenant":`)
	writeString(&b, e.Tenant)
	b.WriteString(`,"at_us":`)
	b.WriteString(strconv.FormatInt(e.At.UnixMicro(), 10))
	b.WriteString(`,"actor":`)
	writeString(&b, e.Actor)
	b.WriteString(`,"action":`)
	writeString(&b, e.Action)
	b.WriteString(`,"subject":`)
	writeString(&b, e.Subject)
	b.WriteString(`,"details":`)
	writeDetails(&b, e.Details)
	b.WriteByte('}')
	return b.Bytes()
}

// Link returns the hash of the link that follows prev for this event:
// hex(SHA-256("jobplane-audit-v1\n" || prev || "\n" || Encode(e))).
func Link(prev string, e *store.AuditEvent) string {
	h := sha256.New()
	io.WriteString(h, domain)
	io.WriteString(h, prev)
	h.Write([]byte{'\n'})
	h.Write(Encode(e))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// writeDetails writes details in canonical form; SQL NULL and JSON null are
// both null. Stored details that are not JSON (only a hand edit can make
// them) are encoded as a JSON string of their text, so that the chain still
// covers them.
//
// Valid JSON, which is what the stores hold, is rewritten in place
// (canonicalValue), without decoding it into maps: the sealer links every
// event, and decoding was most of its cost. Anything else takes the
// decoding path it always took (decodedDetails), so that the encoding of
// odd input cannot change either; FuzzDetailsCanonical holds the two to
// the same bytes.
func writeDetails(b *bytes.Buffer, raw json.RawMessage) {
	if len(bytes.TrimSpace(raw)) == 0 {
		b.WriteString("null")
		return
	}
	if json.Valid(raw) {
		canonicalValue(b, raw, skipSpace(raw, 0))
		return
	}
	decodedDetails(b, raw)
}

// decodedDetails is writeDetails by decoding: the first value of raw in
// canonical form, or raw as a string when it does not decode.
func decodedDetails(b *bytes.Buffer, raw json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		writeString(b, string(raw))
		return
	}
	canonicalJSON(b, v)
}

// canonicalValue writes the JSON value that starts at raw[i] (raw is
// valid JSON) as canonicalJSON writes its decoded form, and returns the
// index after it.
func canonicalValue(b *bytes.Buffer, raw []byte, i int) int {
	switch raw[i] {
	case '{':
		type member struct {
			key        []byte // decoded
			lit        []byte // the literal, when it is already canonical
			start, end int
		}
		var inline [16]member // most objects are small: no allocation for them
		members := inline[:0]
		i = skipSpace(raw, i+1)
		for raw[i] != '}' {
			kEnd := stringEnd(raw, i)
			m := member{lit: raw[i:kEnd]}
			if canonicalLiteral(m.lit) {
				m.key = m.lit[1 : len(m.lit)-1]
			} else {
				m.key, m.lit = []byte(stringValue(m.lit)), nil
			}
			i = skipSpace(raw, kEnd)
			i = skipSpace(raw, i+1) // the colon
			m.start, m.end = i, valueEnd(raw, i)
			members = append(members, m)
			i = skipSpace(raw, m.end)
			if raw[i] == ',' {
				i = skipSpace(raw, i+1)
			}
		}
		// Sorted by key, the last of duplicates kept, as a decoded map.
		slices.SortStableFunc(members, func(x, y member) int { return bytes.Compare(x.key, y.key) })
		b.WriteByte('{')
		first := true
		for j, m := range members {
			if j+1 < len(members) && bytes.Equal(members[j+1].key, m.key) {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			if m.lit != nil {
				b.Write(m.lit)
			} else {
				writeString(b, string(m.key))
			}
			b.WriteByte(':')
			canonicalValue(b, raw, m.start)
		}
		b.WriteByte('}')
		return i + 1
	case '[':
		b.WriteByte('[')
		i = skipSpace(raw, i+1)
		for n := 0; raw[i] != ']'; n++ {
			if n > 0 {
				b.WriteByte(',')
			}
			i = skipSpace(raw, canonicalValue(b, raw, i))
			if raw[i] == ',' {
				i = skipSpace(raw, i+1)
			}
		}
		b.WriteByte(']')
		return i + 1
	case '"':
		end := stringEnd(raw, i)
		if lit := raw[i:end]; canonicalLiteral(lit) {
			b.Write(lit)
		} else {
			writeString(b, stringValue(lit))
		}
		return end
	default: // a number (kept as written, as json.Number keeps it), true, false or null
		end := valueEnd(raw, i)
		b.Write(raw[i:end])
		return end
	}
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string literal at raw[i].
func stringEnd(raw []byte, i int) int {
	for i++; raw[i] != '"'; i++ {
		if raw[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// valueEnd returns the index after the value at raw[i].
func valueEnd(raw []byte, i int) int {
	switch raw[i] {
	case '"':
		return stringEnd(raw, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch raw[i] {
			case '"':
				i = stringEnd(raw, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	default:
		for i < len(raw) && !strings.ContainsRune(",}] \t\n\r", rune(raw[i])) {
			i++
		}
		return i
	}
}

// canonicalLiteral reports whether a string literal of valid JSON is
// already as writeString would write its value: no escape and valid UTF-8
// (valid JSON has no raw control characters in a string).
func canonicalLiteral(lit []byte) bool {
	body := lit[1 : len(lit)-1]
	return bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body)
}

// stringValue decodes a string literal: as written when it holds no escape
// and is valid UTF-8, else as encoding/json decodes it.
func stringValue(lit []byte) string {
	if canonicalLiteral(lit) {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	_ = json.Unmarshal(lit, &s) // valid: the whole input is
	return s
}

// canonicalJSON writes a decoded JSON value: object keys sorted by their
// UTF-8 bytes (the last of duplicate keys wins, as in jsonb), numbers exactly
// as stored, strings as writeString does.
func canonicalJSON(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case json.Number:
		b.WriteString(x.String())
	case string:
		writeString(b, x)
	case []any:
		b.WriteByte('[')
		for i, el := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			canonicalJSON(b, el)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			canonicalJSON(b, x[k])
		}
		b.WriteByte('}')
	}
}

// writeString writes a JSON string: `"` and `\` escaped with a backslash,
// control characters below U+0020 as \u00XX (lower-case hex), everything
// else as literal UTF-8; an invalid UTF-8 byte becomes U+FFFD (neither store
// keeps invalid text: PostgreSQL refuses it and the server never writes it).
func writeString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b.WriteByte('"')
	start := 0 // the bytes from start on are written as they are, in one go
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b.WriteString(s[start:i])
		start = i + 1
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
			b.WriteByte(c)
		} else {
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}
