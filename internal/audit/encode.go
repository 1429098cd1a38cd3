package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	h.Write([]byte(domain))
	h.Write([]byte(prev))
	h.Write([]byte{'\n'})
	h.Write(Encode(e))
	return hex.EncodeToString(h.Sum(nil))
}

// writeDetails writes details in canonical form; SQL NULL and JSON null are
// both null. Stored details that are not JSON (only a hand edit can make
// them) are encoded as a JSON string of their text, so that the chain still
// covers them.
func writeDetails(b *bytes.Buffer, raw json.RawMessage) {
	if len(bytes.TrimSpace(raw)) == 0 {
		b.WriteString("null")
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		writeString(b, string(raw))
		return
	}
	canonicalJSON(b, v)
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
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
